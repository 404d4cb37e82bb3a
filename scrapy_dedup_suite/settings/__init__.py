"""Settings: each declared once (:mod:`.table`, with the frontier's rows in
:mod:`.frontier_rows`), of a kind (:mod:`.kinds`), and read into typed options per
component (:mod:`.options`). Imports only :mod:`..core` and the exceptions."""
