"""A real JWKS endpoint on 127.0.0.1 for the auth tests, and RS256 helpers."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

__all__ = ["KEY_A", "KEY_B", "JwksServer", "jwk", "sign"]


def jwk(private: Any, kid: str) -> dict[str, Any]:
    data = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
    return {**data, "kid": kid, "use": "sig", "alg": "RS256"}


AUDIENCE = "deerflow-api"


def sign(private: Any, kid: str, sub: str = "alice", aud: str = AUDIENCE) -> str:
    now = int(time.time())
    claims = {"sub": sub, "exp": now + 300, "aud": aud}
    return jwt.encode(claims, private, "RS256", headers={"kid": kid})


KEY_A = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KEY_B = rsa.generate_private_key(public_exponent=65537, key_size=2048)


class JwksServer:
    """A real HTTP server on 127.0.0.1 serving a mutable JWKS document."""

    def __init__(self) -> None:
        self.document: Any = {"keys": [jwk(KEY_A, "a")]}
        self.status = 200
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.hits += 1
                body = json.dumps(owner.document).encode()
                self.send_response(owner.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/.well-known/jwks.json"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> JwksServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
