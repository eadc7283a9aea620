"""A protected MCP server with its own authorization server, built from the official Python
SDK's auth support (`mcp.server.auth`): the fixture of crates/cli/tests/oauth.rs.

One process on 127.0.0.1 serves the authorization server (metadata, dynamic registration,
/authorize, /token, /revoke), the protected resource's metadata, and a streamable-HTTP MCP
server at /mcp whose `echo` tool needs a bearer token. Its provider approves every
authorization request at once (the browser's consent step is the test's stand-in).

Control routes, for the test only (not protected):
- POST /control/expire-access: forget every access token (the next request gets a 401);
- POST /control/revoke-refresh: forget every refresh token (the next refresh is refused);
- POST /control/mode?bad=html-token|malformed-metadata|none: misbehave on purpose;
- GET  /control/stats: how many token requests of each grant were made.

Listens on `--port N` (else a free port) and prints `READY <mcp url>` on stdout once it
listens. Stops on SIGTERM.
"""

from __future__ import annotations

import json
import secrets
import socket
import sys
import time

import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

SCOPE = "mcp:tools"
ACCESS_TTL = 3600


class Provider:
    """Everything in memory; every authorization is approved."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.stats = {"authorization_code": 0, "refresh_token": 0}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, authorization_code: str):
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = "at-" + secrets.token_urlsafe(24)
        refresh = "rt-" + secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes,
            expires_at=int(time.time()) + ACCESS_TTL, resource=resource,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource,
        )
        return OAuthToken(
            access_token=access, token_type="Bearer", expires_in=ACCESS_TTL,
            refresh_token=refresh, scope=" ".join(scopes),
        )

    async def exchange_authorization_code(self, client, authorization_code: AuthorizationCode) -> OAuthToken:
        self.stats["authorization_code"] += 1
        self.codes.pop(authorization_code.code, None)
        return self._issue(client.client_id or "", authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(self, client, refresh_token: str):
        # Counted here: a refresh the server refuses is a token request all the same.
        self.stats["refresh_token"] += 1
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client, refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        if self.refresh.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token revoked")
        return self._issue(client.client_id or "", scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else free_port()
    base = f"http://127.0.0.1:{port}"
    provider = Provider()
    server = MCPServer(
        "oauth-fixture",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=[SCOPE]),
            revocation_options=RevocationOptions(enabled=True),
            required_scopes=[SCOPE],
            validate_token_resource=True,
        ),
    )

    @server.tool()
    def echo(message: str) -> str:
        """Echo the message back."""
        return message

    mode = {"bad": "none"}

    @server.custom_route("/control/expire-access", methods=["POST"])
    async def expire_access(_: Request) -> Response:
        provider.access.clear()
        return JSONResponse({"ok": True})

    @server.custom_route("/control/revoke-refresh", methods=["POST"])
    async def revoke_refresh(_: Request) -> Response:
        provider.refresh.clear()
        return JSONResponse({"ok": True})

    @server.custom_route("/control/mode", methods=["POST"])
    async def set_mode(request: Request) -> Response:
        mode["bad"] = request.query_params.get("bad", "none")
        return JSONResponse(mode)

    @server.custom_route("/control/stats", methods=["GET"])
    async def stats(_: Request) -> Response:
        return JSONResponse(provider.stats)

    app = server.streamable_http_app()

    async def misbehaving(scope, receive, send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if mode["bad"] == "html-token" and path == "/token":
            await HTMLResponse("<html><body>Please sign in</body></html>", status_code=200)(scope, receive, send)
            return
        if mode["bad"] == "malformed-metadata" and path == "/.well-known/oauth-authorization-server":
            await Response(json.dumps({"issuer": 5}), media_type="application/json")(scope, receive, send)
            return
        await app(scope, receive, send)

    config = uvicorn.Config(misbehaving, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="on")
    runner = uvicorn.Server(config)
    original = runner.startup

    async def startup(*args, **kwargs):
        await original(*args, **kwargs)
        print(f"READY {base}/mcp", flush=True)

    runner.startup = startup  # type: ignore[method-assign]
    runner.run()


if __name__ == "__main__":
    sys.exit(main())
