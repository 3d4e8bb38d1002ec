"""Developer commands: ``python -m auth mint-token|new-api-key|hash-api-key``.

- ``mint-token --sub alice [--ttl 3600] [--roles a,b] [--permissions x,y]``: an
  HS256 token signed with ``DEERFLOW_AUTH_JWT_SECRET`` (or ``auth.jwt.secret``),
  carrying the configured issuer/audience. For development and tests;
  production tokens come from your identity provider.
- ``new-api-key --identity alice [--roles a,b] [--display-name "Alice"]``: a
  fresh key and a ready-to-paste ``auth:`` block that stores its hash. The key
  is printed once; the config keeps only the hash.
- ``hash-api-key``: the SHA-256 of a key read from stdin.

Like the server under ``make dev``, the commands read the project's ``.env``
(the ``env`` of ``langgraph.json``) and its values win over the shell's, so a
secret kept only in ``.env`` mints tokens the running server accepts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from auth.api_keys import hash_api_key, new_api_key
from auth.identity import is_reserved_identity
from auth.tokens import mint_token
from runtime.config import PROJECT_ROOT, ConfigError, load_settings
from runtime.dev_env import apply_dev_env

__all__ = ["main"]


def _error(message: str) -> int:
    """An error line on stderr (always newline-terminated); exit status 2."""
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()
    return 2


def _csv(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _mint(args: argparse.Namespace) -> int:
    settings = load_settings()
    jwt_config = settings.auth.jwt
    if jwt_config.secret is None:
        return _error(
            "no JWT secret: set DEERFLOW_AUTH_JWT_SECRET (32+ characters) in .env "
            "or auth.jwt.secret in config.yaml"
        )
    if is_reserved_identity(args.sub):
        return _error(f"{args.sub!r} is a reserved identity")
    extra: dict[str, object] = {}
    if args.name:
        extra[jwt_config.display_name_claim or "name"] = args.name
    if args.roles:
        extra[jwt_config.roles_claim or "roles"] = _csv(args.roles)
    if args.permissions:
        extra[jwt_config.permissions_claim or "permissions"] = _csv(args.permissions)
    if jwt_config.identity_claim != "sub":
        extra[jwt_config.identity_claim] = args.sub
    token = mint_token(
        jwt_config.secret.get_secret_value(),
        args.sub,
        ttl_seconds=args.ttl,
        issuer=jwt_config.issuer,
        audience=jwt_config.audience[0] if jwt_config.audience else None,
        extra_claims=extra,
    )
    print(token)
    return 0


def _new_key(args: argparse.Namespace) -> int:
    if is_reserved_identity(args.identity):
        return _error(f"{args.identity!r} is a reserved identity")
    key = new_api_key()
    entry: dict[str, object] = {"identity": args.identity, "sha256": hash_api_key(key)}
    if args.display_name:
        entry["display_name"] = args.display_name
    if args.roles:
        entry["roles"] = _csv(args.roles)
    if args.permissions:
        entry["permissions"] = _csv(args.permissions)
    block = yaml.safe_dump(
        {"auth": {"mode": "api_key", "api_keys": [entry]}}, sort_keys=False
    ).rstrip()
    print(f"# API key (shown once; give it to {args.identity}): {key}")
    print("# Paste into config.yaml (with other keys already there, add only the")
    print("# api_keys entry under your existing auth.api_keys):")
    print(block)
    return 0


def _hash_key(_: argparse.Namespace) -> int:
    key = sys.stdin.readline().strip()
    if not key:
        return _error("no key on stdin")
    print(hash_api_key(key))
    return 0


def main(argv: Sequence[str] | None = None, *, project_config: Path | None = None) -> int:
    """Run a command; ``project_config``: a ``langgraph.json`` whose ``env`` file to
    apply first, as ``langgraph dev`` does (the command line passes the project's)."""
    parser = argparse.ArgumentParser(prog="python -m auth", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    mint = commands.add_parser("mint-token", help="an HS256 dev token")
    mint.add_argument("--sub", required=True, help="the identity (sub claim)")
    mint.add_argument("--ttl", type=int, default=3600, help="seconds until exp (default 3600)")
    mint.add_argument("--name", help="display name claim")
    mint.add_argument("--roles", help="comma-separated roles")
    mint.add_argument("--permissions", help="comma-separated permissions")
    mint.set_defaults(run=_mint)
    new = commands.add_parser("new-api-key", help="a new API key and its config entry")
    new.add_argument("--identity", required=True)
    new.add_argument("--display-name", help="display name of the key's user")
    new.add_argument("--roles", help="comma-separated roles")
    new.add_argument("--permissions", help="comma-separated permissions")
    new.set_defaults(run=_new_key)
    hashed = commands.add_parser("hash-api-key", help="SHA-256 of a key from stdin")
    hashed.set_defaults(run=_hash_key)
    args = parser.parse_args(argv)
    if project_config is not None:
        apply_dev_env(project_config)
    try:
        return int(args.run(args))
    except ConfigError as exc:
        return _error(str(exc))


if __name__ == "__main__":
    raise SystemExit(main(project_config=PROJECT_ROOT / "langgraph.json"))
