"""Node controllers: initialisation (cloud node controller) and lifecycle (cloud node lifecycle controller).

Pure decisions in `model`, `initializer`, `lifecycle`, `plan` and `events`; I/O in `api` (Kubernetes), `sync`
(applying plans), `batch` (SQS FIFO batch + retry delays) and `runtime` (the Lambda, with the consumer registry
that load-balancer membership and routes plug into). The EC2 driver is `ccm.aws.instances`.
"""
