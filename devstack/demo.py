"""The demo: start the local stack, create a LoadBalancer Service with kubectl, and show it getting its
EXTERNAL-IP hostname, with the measured latency (kubectl apply -> hostname in status)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devstack.aws_faithful import ENV_SG_RELEASE, FaithfulSettings
from devstack.stack import Stack, StackConfig

# AWS releases a deleted NLB's network interfaces, and so its security group, minutes after DeleteLoadBalancer;
# the controller waits that out (a queue retry, 15 s first). The devstack holds the group 120 s by default, so
# the demo's delete would take minutes: it shortens the hold (DEVSTACK_SG_RELEASE_SECONDS overrides) and says so.
DEMO_SG_RELEASE_SECONDS = 5.0
# Long enough for the delete's one wait-retry (15 s after the hold is seen) on a loaded machine.
DELETE_TIMEOUT_SECONDS = 120

SERVICE_YAML = """apiVersion: v1
kind: Service
metadata:
  name: hello
  namespace: default
spec:
  type: LoadBalancer
  selector: {app: hello}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: https, port: 443, targetPort: 8443}
"""


def kubectl(kubeconfig: str, *args: str) -> str:
    return subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, *args], check=True, capture_output=True, text=True
    ).stdout


def main() -> int:
    if shutil.which("kubectl") is None:
        print("kubectl is not on PATH", file=sys.stderr)
        return 1
    state_dir = Path(tempfile.mkdtemp(prefix="ccm-demo-"))
    # Keep the demo's own output clean: the stack's and the functions' log lines go to a file.
    out = sys.stdout
    sys.stdout = (state_dir / "lambda.log").open("w")
    say = functools.partial(print, file=out, flush=True)
    say("starting the local stack (Kubernetes API emulator, moto server, queues, watcher, Lambda runner) ...")
    hold = float(os.environ.get(ENV_SG_RELEASE, DEMO_SG_RELEASE_SECONDS))
    aws = FaithfulSettings(sg_release_seconds=hold)
    with Stack(StackConfig(state_dir=state_dir, function_logs=sys.stdout, aws=aws)) as stack:
        kc = stack.kubeconfig
        say(kubectl(kc, "get", "nodes", "-o", "wide"))
        manifest = state_dir / "hello.yaml"
        manifest.write_text(SERVICE_YAML)
        started = time.monotonic()
        say(kubectl(kc, "apply", "-f", str(manifest)).strip())
        say(kubectl(kc, "get", "svc", "hello"))
        host = stack.wait_for(
            lambda: kubectl(kc, "get", "svc", "hello", "-o", "jsonpath={.status.loadBalancer.ingress[0].hostname}"),
            timeout=60,
            interval=0.05,
            what="EXTERNAL-IP",
        )
        latency = time.monotonic() - started
        say(kubectl(kc, "get", "svc", "hello"))
        say(f"EXTERNAL-IP hostname: {host}")
        say(f"latency (kubectl apply -> hostname in status, including kubectl's own start-up): {latency:.2f} s")
        say(kubectl(kc, "get", "events", "--field-selector", "involvedObject.name=hello"))
        say("deleting the Service (the finalizer holds it until the NLB and its security group are gone) ...")
        say(
            "  AWS keeps a deleted NLB's network interfaces, and so its security group, for minutes; the controller"
            f" waits that out with a queue retry. The demo shortens the hold to {hold:g} s ({ENV_SG_RELEASE})."
        )
        deleting = time.monotonic()
        say(kubectl(kc, "delete", "svc", "hello", "--wait=false").strip())
        stack.wait_for(
            lambda: "hello" not in kubectl(kc, "get", "svc", "-o", "name"),
            timeout=DELETE_TIMEOUT_SECONDS,
            interval=0.5,
            what="the Service to be gone",
        )
        say(f"Service gone after {time.monotonic() - deleting:.1f} s")
        say("load balancers left:", len(stack.aws("elbv2").describe_load_balancers()["LoadBalancers"]))
        say(f"Lambda logs (JSON, with EMF metrics): {state_dir / 'lambda.log'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
