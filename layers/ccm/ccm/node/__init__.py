"""Node controllers: initialisation (cloud node controller) and lifecycle (cloud node lifecycle controller).

Pure decisions in `model`, `initializer`, `lifecycle`, `plan` and `events`; I/O in `api` (Kubernetes), `sync`
(applying plans) and `runtime` (the Lambda, with the consumer registry that load-balancer membership and routes
plug into). The SQS FIFO batch and its retry delays are `ccm.batch`, shared with the services Lambda; the EC2
driver (`ccm.aws.instances`) is built by the composition root (ccm.wiring.nodes) and seen here only as
`ccm.contracts.cloud.Instances`.
"""
