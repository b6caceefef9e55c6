"""The composition roots of the functions: the only place that reads the environment (`settings`) and decides
which concrete driver, store and consumer each controller gets. One module per function; each exposes `runtime`
(built once per execution environment) for its handler, and a `build_*` that tests and the bench call with their
own settings, clients and Kubernetes client."""
