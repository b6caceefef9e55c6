"""scripts/create-kubeconfig-secret's last step: the kubeconfig, read from stdin (never from the command line, where
`ps` would show its token), is checked (one context, a server, a token) and stored in Secrets Manager: the secret is
created, or gets a new version when it exists (a second run rotates the token). Prints the secret's ARN, nothing else.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import yaml


def check(text: str) -> None:
    """Refuses a kubeconfig the functions could not use (the message never includes the token)."""
    config = yaml.safe_load(text) if text.strip() else None
    if not isinstance(config, dict):
        raise ValueError("the kubeconfig is empty or not a mapping")
    users = config.get("users") or []
    clusters = config.get("clusters") or []
    if len(users) != 1 or not (users[0].get("user") or {}).get("token"):
        raise ValueError("the kubeconfig has no token (did the token controller fill the ServiceAccount's Secret?)")
    if len(clusters) != 1 or not str((clusters[0].get("cluster") or {}).get("server", "")).startswith("https://"):
        raise ValueError("the kubeconfig's server must be an https:// URL the functions can reach (--server)")


def store(client: Any, name: str, text: str, kms_key_id: str | None = None) -> str:
    try:
        arn: str = client.describe_secret(SecretId=name)["ARN"]
    except client.exceptions.ResourceNotFoundException:
        create: dict[str, Any] = {
            "Name": name,
            "SecretString": text,
            "Description": "kubeconfig of serverless-ccm's functions (scripts/create-kubeconfig-secret)",
        }
        if kms_key_id:
            create["KmsKeyId"] = kms_key_id
        created: str = client.create_secret(**create)["ARN"]
        return created
    client.put_secret_value(SecretId=arn, SecretString=text)
    return arn


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccm.install.kubeconfig_secret", description=__doc__)
    p.add_argument("--name", required=True)
    p.add_argument("--region")
    p.add_argument("--kms-key-id", help="a customer managed key (then give it as KubeconfigSecretKmsKeyArn too)")
    args = p.parse_args(argv)
    text = sys.stdin.read()
    try:
        check(text)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    import boto3

    print(store(boto3.client("secretsmanager", region_name=args.region), args.name, text, args.kms_key_id))
    return 0


if __name__ == "__main__":
    sys.exit(main())
