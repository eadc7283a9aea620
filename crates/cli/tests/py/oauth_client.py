"""Reaches an OAuth-protected MCP endpoint with the official Python SDK client (`mcp` 2.3.0) and
its own OAuth support, `ClientCredentialsOAuthProvider`, and prints one JSON line of what it saw
for the Rust test (crates/cli/tests/auth_python.rs) to assert on.

The client is given the `/mcp` URL, a client id and a client secret, and nothing else (unless
--issuer pins the authorization server, the SDK's recommended form): the SDK must find the
issuer through the 401's `WWW-Authenticate` challenge and the RFC 9728 metadata, find the token
endpoint in the issuer's metadata, get a client-credentials token for this resource (RFC 8707)
and retry. Then it lists the tools, calls `--echo` and `--count` (with `--count-id`).

It asserts nothing: it records every HTTP request the SDK made (method, URL, status, which kind
of credentials it carried, a digest of the bearer token if any, and the form of a token request
without its secrets), the claims of the access token it ended up with (decoded, not verified)
and its digest, the calls' answers, and any exception.
It exits 0 when every step succeeded, 1 otherwise (the JSON line is printed either way).
Everything is bounded by --deadline and each HTTP request by --request-timeout.

Usage:
    oauth_client.py --url URL --client-id ID --client-secret SECRET [--issuer URL]
                    [--mode legacy|auto] [--echo NAME] [--count NAME] [--count-id ID]
                    [--deadline SECONDS]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import warnings
from typing import Any
from urllib.parse import parse_qsl

import anyio
import httpx2
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp.shared.exceptions import MCPError

READ_TIMEOUT_S = 20.0
# Form fields of a token request that are never recorded.
SECRET_FIELDS = {"client_secret", "client_assertion"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="the MCP endpoint (…/mcp)")
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--issuer", help="pin the authorization server (default: discovery only)")
    parser.add_argument("--mode", default="auto", choices=["legacy", "auto"])
    parser.add_argument("--echo", default="f__echo", help="the echo tool's public name")
    parser.add_argument("--count", default="f__count", help="the count tool's public name")
    parser.add_argument("--count-id", default="python-oauth", help="the count tool's id argument")
    parser.add_argument("--deadline", type=float, default=60.0)
    parser.add_argument("--request-timeout", type=float, default=20.0)
    return parser.parse_args()


class MemoryStorage:
    """The SDK's `TokenStorage` protocol, in memory; keeps every token it was given."""

    def __init__(self) -> None:
        self.tokens: list[OAuthToken] = []
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens[-1] if self.tokens else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class RequestLog:
    """httpx2 event hooks: every request the client sends, the auth flow's own included."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._by_request: dict[int, dict[str, Any]] = {}

    async def on_request(self, request: httpx2.Request) -> None:
        entry: dict[str, Any] = {
            "method": request.method,
            "url": str(request.url),
            "auth": credentials_kind(request.headers.get("authorization")),
        }
        bearer = bearer_of(request.headers.get("authorization"))
        if bearer is not None:
            entry["bearer_digest"] = digest(bearer)
        content_type = request.headers.get("content-type", "")
        if request.method == "POST" and content_type.startswith("application/x-www-form-urlencoded"):
            form = dict(parse_qsl(request.content.decode("utf-8", "replace")))
            entry["form"] = {k: ("(hidden)" if k in SECRET_FIELDS else v) for k, v in form.items()}
        elif request.method == "POST":
            entry["rpc"] = rpc_method(request.content)
        self.entries.append(entry)
        self._by_request[id(request)] = entry

    async def on_response(self, response: httpx2.Response) -> None:
        entry = self._by_request.pop(id(response.request), None)
        if entry is None:
            return
        entry["status"] = response.status_code
        challenge = response.headers.get("www-authenticate")
        if challenge is not None:
            entry["www_authenticate"] = challenge
        if response.status_code >= 400 and entry.get("form") is not None:
            # A refused token request: the error the authorization server named.
            await response.aread()
            entry["body"] = response.text[:500]


def credentials_kind(authorization: str | None) -> str | None:
    """`bearer`, `basic` (the scheme only, never the credentials), or None."""
    if not authorization:
        return None
    return authorization.split(" ", 1)[0].lower()


def bearer_of(authorization: str | None) -> str | None:
    if not authorization or not authorization.lower().startswith("bearer "):
        return None
    return authorization[len("bearer ") :].strip()


def digest(token: str) -> str:
    """Which token a request carried, without the token: its SHA-256, hex, first 16 digits."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def rpc_method(content: bytes) -> str | None:
    try:
        message = json.loads(content)
    except ValueError:
        return None
    return message.get("method") if isinstance(message, dict) else None


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The payload of a compact JWS, decoded without verification (the proxy verifies)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = parts[1] + "=" * (-len(parts[1]) % 4)
        return json.loads(base64.urlsafe_b64decode(payload))
    except ValueError:
        return None


def text_of(result: Any) -> str:
    return "\n".join(getattr(b, "text", "") for b in result.content if getattr(b, "type", "") == "text")


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    try:
        result = await client.call_tool(name, arguments)
        out.update(ok=True, text=text_of(result), is_error=bool(result.is_error))
    except MCPError as error:
        out.update(ok=False, error_code=error.code, error=error.error.message)
    return out


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds (the SDK's task groups wrap what they raise)."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for e in error.exceptions for leaf in leaves(e)]
    return [error]


async def run(args: argparse.Namespace, out: dict[str, Any]) -> None:
    storage = MemoryStorage()
    log = RequestLog()
    out["requests"] = log.entries
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        provider = ClientCredentialsOAuthProvider(
            server_url=args.url,
            storage=storage,
            client_id=args.client_id,
            client_secret=args.client_secret,
            issuer=args.issuer,
        )
    out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    http = httpx2.AsyncClient(
        auth=provider,
        timeout=httpx2.Timeout(args.request_timeout),
        event_hooks={"request": [log.on_request], "response": [log.on_response]},
    )
    try:
        async with http:
            transport = streamable_http_client(args.url, http_client=http)
            async with Client(
                transport, mode=args.mode, cache=None, read_timeout_seconds=READ_TIMEOUT_S
            ) as client:
                out["connected"] = True
                out["protocol_version"] = client.protocol_version
                out["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
                out["echo"] = await call(client, args.echo, {"message": "hello through oauth"})
                out["count"] = await call(client, args.count, {"id": args.count_id})
    finally:
        context = provider.context
        out["tokens_stored"] = len(storage.tokens)
        token = storage.tokens[-1] if storage.tokens else None
        if token is not None:
            out["token"] = {
                "token_type": token.token_type,
                "scope": token.scope,
                "expires_in": token.expires_in,
                "digest": digest(token.access_token),
                "claims": jwt_claims(token.access_token),
            }
        prm = context.protected_resource_metadata
        out["resource_metadata"] = prm.model_dump(mode="json", exclude_none=True) if prm else None
        asm = context.oauth_metadata
        out["issuer_metadata"] = (
            {"issuer": str(asm.issuer), "token_endpoint": str(asm.token_endpoint)} if asm else None
        )
        out["auth_server_url"] = context.auth_server_url
        out["requested_scope"] = context.client_metadata.scope
        out["resource_url"] = context.get_resource_url()


async def main() -> int:
    args = parse_args()
    out: dict[str, Any] = {"connected": False}
    try:
        with anyio.fail_after(args.deadline):
            await run(args, out)
        calls = [out.get("echo", {}), out.get("count", {})]
        out["ok"] = all(c.get("ok") and not c.get("is_error") for c in calls)
    except BaseException as error:  # noqa: BLE001 - recorded for the Rust test to judge
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        out["ok"] = False
        out["error"] = "; ".join(f"{type(e).__name__}: {e}" for e in leaves(error))
        out["error_types"] = sorted({type(e).__name__ for e in leaves(error)})
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
