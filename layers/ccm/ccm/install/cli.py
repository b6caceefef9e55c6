"""`python -m ccm.install` (scripts/install-watcher): after `sam deploy`, build and push the watcher image to the
stack's ECR repository (or take --image), render the overlay from the stack, apply it, wait for the watcher, run
the doctor. I/O only; what gets applied is ccm.install.render's."""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import boto3

from ccm.install.render import Image, RenderError, StackView, render

REPO = Path(__file__).resolve().parents[4]  # layers/ccm/ccm/install -> the checkout
NAMESPACE, DEPLOYMENT = "serverless-ccm", "serverless-ccm-watcher"  # deploy/base


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/install-watcher", description=__doc__)
    p.add_argument("--stack", required=True, help="the stack sam deploy created (its stack_name)")
    p.add_argument("--region", default=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    p.add_argument("--image", help="an image already pushed, REPOSITORY@sha256:DIGEST (skips build and push)")
    p.add_argument("--repository", help="push here instead of the stack's WatcherImageRepositoryUri")
    p.add_argument("--tls-verify", default="true", choices=["true", "false"], help="false: a local test registry")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--out", help="where the overlay goes (default .serverless-ccm/<stack> in the checkout)")
    p.add_argument("--render-only", action="store_true", help="write the overlay, apply nothing")
    p.add_argument("--timeout", default="180s", help="how long to wait for the watcher's rollout")
    return p.parse_args(argv)


def stack_view(cloudformation: object, name: str, region: str) -> StackView:
    stack = cloudformation.describe_stacks(StackName=name)["Stacks"][0]  # type: ignore[attr-defined]
    return StackView(
        name,
        region,
        {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])},
        {p["ParameterKey"]: p.get("ResolvedValue", p["ParameterValue"]) for p in stack.get("Parameters", [])},
    )


def push(local: str, repository: str, tag: str, creds: str | None = None, tls_verify: bool = True) -> Image:
    """buildah push LOCAL to REPOSITORY:TAG; the digest the registry stored (what the pods pull)."""
    with tempfile.TemporaryDirectory() as tmp:
        digest_file = Path(tmp) / "digest"
        cmd = ["buildah", "push", f"--tls-verify={str(tls_verify).lower()}", "--digestfile", str(digest_file)]
        cmd += ["--creds", creds] if creds else []
        subprocess.run([*cmd, local, f"docker://{repository}:{tag}"], check=True, stdout=sys.stderr)
        return Image(repository, digest_file.read_text().strip())


def ecr_creds(ecr: object) -> str:
    token = ecr.get_authorization_token()["authorizationData"][0]["authorizationToken"]  # type: ignore[attr-defined]
    return base64.b64decode(token).decode()  # "AWS:<password>", as buildah --creds takes it


def build() -> str:
    """scripts/build-watcher-image.sh: the local image's name (its last line of output)."""
    out = subprocess.run([str(REPO / "scripts/build-watcher-image.sh")], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def parse_image(ref: str) -> Image:
    repository, sep, digest = ref.partition("@")
    if not sep:
        raise RenderError(f"--image {ref}: give it by digest, REPOSITORY@sha256:... (a tag can move)")
    return Image(repository, digest)


def write_overlay(out: Path, files: dict[str, str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out / name).write_text(text)


def kubectl(args: argparse.Namespace, *cmd: str) -> None:
    base = ["kubectl", *(["--kubeconfig", args.kubeconfig] if args.kubeconfig else [])]
    subprocess.run([*base, *cmd], check=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    session = boto3.session.Session(region_name=args.region)
    region = session.region_name or ""
    stack = stack_view(session.client("cloudformation"), args.stack, region)
    if args.image:
        try:
            image = parse_image(args.image)
        except RenderError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    else:
        repository = args.repository or stack.outputs.get("WatcherImageRepositoryUri")
        if not repository:
            print(f"stack {args.stack} has no WatcherImageRepositoryUri output: give --repository", file=sys.stderr)
            return 2
        local = build()
        creds = None if args.repository else ecr_creds(session.client("ecr"))
        image = push(local, repository, local.rsplit(":", 1)[-1], creds, args.tls_verify == "true")
    out = Path(args.out) if args.out else REPO / ".serverless-ccm" / args.stack
    deploy_dir = os.path.relpath(REPO / "deploy", out.resolve())
    try:
        files = render(stack, image, deploy_dir)
    except RenderError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write_overlay(out, files)
    print(f"overlay: {out} (image {image.repository}@{image.digest})", file=sys.stderr)
    if args.render_only:
        return 0
    kubectl(args, "apply", "-k", str(out))
    kubectl(args, "-n", NAMESPACE, "rollout", "status", f"deployment/{DEPLOYMENT}", f"--timeout={args.timeout}")
    doctor = [str(REPO / "scripts/doctor"), "--cluster", stack.parameters.get("ClusterName", ""), "--stack", args.stack]
    doctor += ["--region", region, "--overlay", str(out)]
    doctor += ["--kubeconfig", args.kubeconfig] if args.kubeconfig else []
    return subprocess.run(doctor, check=False).returncode
