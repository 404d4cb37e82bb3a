"""The Redis server: clients (:mod:`.connection`, :mod:`.sentinel`), the package's Lua
scripts (:mod:`.scripts`, their answer codes in :mod:`.answers`), what a failure is
(:mod:`.failures`) and what each feature may send (:mod:`.privileges`). Imports only
:mod:`..settings`, :mod:`..core` and the exceptions."""
