// A real OpenID provider for the tests of the OAuth resource server (SPEC §14): the pinned
// npm package `oidc-provider` (tools/package.json), configured for machine-to-machine tokens.
//
//   node idp.mjs --keys FILE --config FILE_OR_JSON [--port N] [--modules DIR] [--die-with-stdin]
//
// --port N          listen on 127.0.0.1:N (0 or absent: any free port). The issuer is
//                   http://127.0.0.1:PORT (no path), so a restart on the same port is the same issuer.
// --keys FILE       the signing keys, a JWKS with private RSA keys (each with a `kid`). When FILE
//                   does not exist, one RSA-2048 key is generated with node's crypto and written
//                   there (mode 0600). A restart with another file rotates the keys.
// --config X        a JSON object, inline (starts with `{`) or the path of a file; when absent, the
//                   environment variable IDP_CONFIG holds it. Keys:
//     "clients": [{ "client_id", "client_secret", "sub"?, "scope"?, any other client metadata }]
//         Each client may use the client credentials grant and the token exchange grant (unless
//         it lists its own "grant_types"); it authenticates with client_secret_basic (HTTP Basic,
//         the default) or whatever "token_endpoint_auth_method" it names.
//         "sub": the subject of this client's client-credentials tokens. oidc-provider gives a
//         client-credentials token no user, so its `sub` is the client_id; a client with "sub"
//         stands for that user instead (one client per test identity: alice, bob, ...).
//     "resources": { RESOURCE_URI: "scope1 scope2", ..., "*": "scope ..." }
//         the resource servers (RFC 8707 resource indicators) and the scopes each allows; "*"
//         accepts any other absolute URI with those scopes. Default: { "*": "mcp:tools admin" }.
//     "accessTokenTTL": seconds (default 600), the lifetime of every access token issued.
//     "notBeforeOffset": seconds (default: none): every JWT access token gets `nbf` = its signing
//         time plus this (a token not yet valid, for the tests of `nbf`).
// --modules DIR     the node_modules folder that holds oidc-provider (default: the repository's
//                   tools/node_modules, found from this script's place).
// --die-with-stdin  exit when stdin reaches its end: a test that dies without stopping this
//                   process (its pipe closes) does not leave it behind.
//
// When it listens, one JSON line goes to stdout and nothing else ever does:
//   {"issuer":"http://127.0.0.1:PORT","port":PORT,"kids":["..."]}
// Everything else (oidc-provider's notices, errors) goes to stderr.
//
// What it serves (oidc-provider's own routes):
//   /.well-known/openid-configuration   discovery, with jwks_uri and token_endpoint
//   /jwks                               the public half of the keys
//   /token                              client_credentials with `resource` (one) and `scope`:
//                                       a JWT access token (RFC 9068, typ at+jwt, RS256) whose
//                                       `aud` is the resource and whose scope is the requested
//                                       scopes that the resource allows;
//                                       urn:ietf:params:oauth:grant-type:token-exchange (RFC 8693),
//                                       registered below with Provider#registerGrantType.
//   /token/introspection                introspection (RFC 7662), for completeness.

import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as http from "node:http";
import { createRequire } from "node:module";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

// stdout carries the ready line only: oidc-provider prints its notices with console.info, so
// every console method that would write to stdout writes to stderr instead.
console.log = console.error;
console.info = console.error;
console.debug = console.error;

const TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token";
const JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt";

// ---- arguments ----

const argv = process.argv.slice(2);
function opt(name, fallback) {
  const i = argv.indexOf(name);
  if (i === -1) return fallback;
  if (i + 1 >= argv.length) fail(`${name} needs a value`);
  return argv[i + 1];
}
function fail(message) {
  process.stderr.write(`idp: ${message}\n`);
  process.exit(2);
}

const here = path.dirname(fileURLToPath(import.meta.url));
const port = Number(opt("--port", "0"));
const keysPath = opt("--keys", null);
const configText = opt("--config", process.env.IDP_CONFIG ?? null);
const modules = opt("--modules", path.resolve(here, "../../../tools/node_modules"));
if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`--port ${port}: not a port`);
if (!keysPath) fail("--keys FILE is required (it is created when missing)");
if (!configText) fail("--config (or IDP_CONFIG) is required: {\"clients\": [...]}");

let config;
try {
  const text = configText.trimStart().startsWith("{")
    ? configText
    : fs.readFileSync(configText, "utf8");
  config = JSON.parse(text);
} catch (e) {
  fail(`the config cannot be read: ${e.message}`);
}
if (!Array.isArray(config.clients) || config.clients.length === 0) {
  fail("the config has no \"clients\" (a non-empty array)");
}
const resources = config.resources ?? { "*": "mcp:tools admin" };
const accessTokenTTL = config.accessTokenTTL ?? 600;
const notBeforeOffset = config.notBeforeOffset;
if (notBeforeOffset !== undefined && !Number.isInteger(notBeforeOffset)) {
  fail("config.notBeforeOffset must be a whole number of seconds");
}

if (argv.includes("--die-with-stdin")) {
  process.stdin.on("data", () => {});
  process.stdin.on("end", () => process.exit(0));
  process.stdin.on("error", () => process.exit(0));
}
process.on("SIGTERM", () => process.exit(0));
process.on("SIGINT", () => process.exit(0));

// ---- signing keys ----

// Reads the JWKS at `file`, or makes one RSA key, writes it there, and returns it.
function loadOrCreateKeys(file) {
  if (fs.existsSync(file)) {
    const jwks = JSON.parse(fs.readFileSync(file, "utf8"));
    if (!Array.isArray(jwks.keys) || jwks.keys.length === 0) {
      fail(`${file} holds no "keys"`);
    }
    for (const key of jwks.keys) {
      if (!key.kid || !key.d) fail(`${file}: every key needs a "kid" and its private part`);
    }
    return jwks;
  }
  const { privateKey } = crypto.generateKeyPairSync("rsa", { modulusLength: 2048 });
  const jwk = privateKey.export({ format: "jwk" });
  // The kid: the key's RFC 7638 thumbprint, so a new key always has a new kid.
  const thumbprintInput = JSON.stringify({ e: jwk.e, kty: jwk.kty, n: jwk.n });
  const kid = crypto.createHash("sha256").update(thumbprintInput).digest("base64url");
  const jwks = { keys: [{ ...jwk, kid, use: "sig", alg: "RS256" }] };
  const temporary = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(temporary, JSON.stringify(jwks, null, 2), { mode: 0o600 });
  fs.renameSync(temporary, file);
  return jwks;
}
const jwks = loadOrCreateKeys(keysPath);

// The public keys by kid, for verifying the subject tokens of a token exchange (tokens this
// provider signed with the keys it holds now).
const publicKeys = new Map(
  jwks.keys.map((jwk) => [jwk.kid, crypto.createPublicKey({ key: jwk, format: "jwk" })]),
);

// ---- clients ----

// client_id -> the `sub` of its client-credentials tokens (when the config names one).
const subjectOfClient = new Map();
const clients = config.clients.map((entry) => {
  const { sub, ...metadata } = entry;
  if (!metadata.client_id || !metadata.client_secret) {
    fail(`a client needs "client_id" and "client_secret": ${JSON.stringify(entry)}`);
  }
  if (sub !== undefined) subjectOfClient.set(metadata.client_id, String(sub));
  return {
    grant_types: ["client_credentials", TOKEN_EXCHANGE],
    // No browser flows: no redirect URIs, no response types.
    redirect_uris: [],
    response_types: [],
    ...metadata,
  };
});

// ---- resource servers ----

// The scopes resource `identifier` allows, or undefined when it is not one of ours.
function scopesOf(identifier) {
  if (Object.hasOwn(resources, identifier)) return resources[identifier];
  if (identifier !== "*" && Object.hasOwn(resources, "*")) return resources["*"];
  return undefined;
}

// features.resourceIndicators.getResourceServerInfo: every resource server gets JWT access
// tokens (RFC 9068) signed RS256 with the provider's key, `aud` = the resource indicator.
function resourceServerInfo(identifier) {
  const scope = scopesOf(identifier);
  if (scope === undefined) return undefined;
  return {
    scope,
    accessTokenTTL,
    accessTokenFormat: "jwt",
    jwt: { sign: { alg: "RS256" } },
  };
}

// ---- the provider ----

const require = createRequire(path.join(modules, "package.json"));
let entry;
try {
  entry = require.resolve("oidc-provider");
} catch {
  fail(`oidc-provider is not installed in ${modules}: run scripts/install-test-deps.sh`);
}
const { default: Provider, errors } = await import(pathToFileURL(entry).href);

// Listen first (port 0 picks one), then make the provider: the issuer names the port.
const server = http.createServer();
await new Promise((resolve, reject) => {
  server.once("error", reject);
  server.listen(port, "127.0.0.1", resolve);
});
server.on("error", (e) => process.stderr.write(`idp: server error: ${e.message}\n`));
const issuer = `http://127.0.0.1:${server.address().port}`;

// The subject of each token-exchange access token (kept beside the token object, read by the
// JWT customizer below, which sets `sub` and `act`).
const exchanged = new WeakMap();

// Every scope a resource or a client names is one the provider knows (discovery's
// scopes_supported), so a client whose metadata lists its scopes is refused the others
// (invalid_scope) rather than silently given fewer.
const knownScopes = new Set(["openid", "offline_access"]);
for (const list of [...Object.values(resources), ...clients.map((c) => c.scope ?? "")]) {
  for (const scope of String(list).split(" ")) if (scope) knownScopes.add(scope);
}

const provider = new Provider(issuer, {
  clients,
  jwks,
  scopes: [...knownScopes],
  // Plain `sub` (no pairwise identifiers); RS256 for everything signed.
  clientDefaults: {
    grant_types: ["client_credentials"],
    id_token_signed_response_alg: "RS256",
    response_types: [],
    token_endpoint_auth_method: "client_secret_basic",
  },
  features: {
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    // No login pages: this provider only serves machine clients.
    devInteractions: { enabled: false },
    resourceIndicators: {
      enabled: true,
      // A client that names no resource gets no audience (and so an opaque token): the tests
      // always name one.
      defaultResource: async () => undefined,
      getResourceServerInfo: async (_ctx, identifier) => {
        const info = resourceServerInfo(identifier);
        if (!info) throw new errors.InvalidTarget(`unknown resource ${identifier}`);
        return info;
      },
      useGrantedResource: async () => true,
    },
  },
  formats: {
    customizers: {
      // Runs just before a JWT access token is signed (the documented place to change claims).
      async jwt(_ctx, token, jwt) {
        if (token.kind === "ClientCredentials") {
          // A client-credentials token of a client that stands for a user carries that user.
          const sub = subjectOfClient.get(token.clientId);
          if (sub !== undefined) jwt.payload.sub = sub;
        }
        const exchange = exchanged.get(token);
        if (exchange) {
          // RFC 8693 §4.1: the subject stays, `act` names the party that acts for it.
          jwt.payload.sub = exchange.sub;
          jwt.payload.act = { sub: exchange.actor };
          if (exchange.subjectClient) jwt.payload.subject_client_id = exchange.subjectClient;
        }
        if (notBeforeOffset !== undefined) {
          jwt.payload.nbf = Math.floor(Date.now() / 1000) + notBeforeOffset;
        }
      },
    },
  },
  ttl: {
    AccessToken: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? accessTokenTTL,
    ClientCredentials: (_ctx, token) => token.resourceServer?.accessTokenTTL ?? accessTokenTTL,
    Grant: accessTokenTTL,
    Interaction: 60,
    Session: 60,
  },
  // The tests reach it on loopback only; CORS never applies.
  clientBasedCORS: () => false,
  // Fixed cookie keys: it serves no browser, but oidc-provider wants them set.
  cookies: { keys: [crypto.randomBytes(32).toString("hex")] },
});

// ---- RFC 8693 token exchange ----

// invalid_grant with the reason as its error_description (oidc-provider's InvalidGrant keeps the
// reason out of the answer; a test that fails should read it).
const invalidGrant = (why) => new errors.CustomOIDCProviderError("invalid_grant", why);

// Verifies `token`, a JWT access token this provider issued: compact JWS, typ at+jwt, RS256,
// signed by one of the keys it holds now, iss = this issuer, not expired. Returns its claims.
function verifySubjectToken(token) {
  const parts = token.split(".");
  if (parts.length !== 3) throw invalidGrant("subject_token is not a JWT");
  let header;
  let claims;
  try {
    header = JSON.parse(Buffer.from(parts[0], "base64url").toString("utf8"));
    claims = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8"));
  } catch {
    throw invalidGrant("subject_token is not a JWT");
  }
  if (header.alg !== "RS256") throw invalidGrant(`subject_token alg ${header.alg} is not RS256`);
  if (header.typ !== "at+jwt") throw invalidGrant("subject_token is not a JWT access token (typ at+jwt)");
  const key = publicKeys.get(header.kid);
  if (!key) throw invalidGrant(`subject_token is signed by an unknown key (kid ${header.kid})`);
  const signed = Buffer.from(`${parts[0]}.${parts[1]}`, "ascii");
  const signature = Buffer.from(parts[2], "base64url");
  if (!crypto.verify("sha256", signed, key, signature)) {
    throw invalidGrant("subject_token signature is invalid");
  }
  if (claims.iss !== issuer) throw invalidGrant("subject_token was not issued here");
  const now = Math.floor(Date.now() / 1000);
  if (typeof claims.exp !== "number" || claims.exp <= now) {
    throw invalidGrant("subject_token is expired");
  }
  if (typeof claims.sub !== "string" || claims.sub === "") {
    throw invalidGrant("subject_token has no sub");
  }
  return claims;
}

// One value of a parameter that may repeat (resource, audience): more than one is refused.
function single(params, name) {
  const value = params[name];
  if (Array.isArray(value)) {
    if (value.length > 1) throw new errors.InvalidTarget(`only one ${name} is supported`);
    return value[0];
  }
  return value;
}

// The grant handler (Provider#registerGrantType's documented shape: `ctx.oidc.params` holds
// the parameters, `ctx.oidc.client` the authenticated client). Issues an access token for the
// requested `resource` (or `audience`) to the acting client, for the subject token's `sub`.
async function tokenExchange(ctx) {
  const { params, client } = ctx.oidc;
  if (!params.subject_token) throw new errors.InvalidRequest("missing required parameter 'subject_token'");
  if (!params.subject_token_type) throw new errors.InvalidRequest("missing required parameter 'subject_token_type'");
  if (![ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE].includes(params.subject_token_type)) {
    throw new errors.InvalidRequest(`unsupported subject_token_type ${params.subject_token_type}`);
  }
  if (params.requested_token_type && params.requested_token_type !== ACCESS_TOKEN_TYPE) {
    throw new errors.InvalidRequest(`unsupported requested_token_type ${params.requested_token_type}`);
  }
  if (params.actor_token) throw new errors.InvalidRequest("actor_token is not supported (the client is the actor)");

  const subject = verifySubjectToken(params.subject_token);

  const target = single(params, "resource") ?? single(params, "audience");
  if (!target) throw new errors.InvalidTarget("a resource or audience is required");
  const info = resourceServerInfo(target);
  if (!info) throw new errors.InvalidTarget(`unknown resource ${target}`);
  const resourceServer = new provider.ResourceServer(target, info);

  // Scopes: those requested that the resource allows; none requested: all the resource allows
  // (that the client may have, when its metadata limits them).
  // A requested scope beyond the client's own list is refused, as for client credentials.
  const allowed = resourceServer.scopes;
  const clientScopes = client.scope ? new Set(client.scope.split(" ")) : null;
  const requested = params.scope ? params.scope.split(" ").filter(Boolean) : [...allowed];
  for (const s of requested) {
    if (clientScopes && params.scope && !clientScopes.has(s)) {
      throw new errors.InvalidScope("requested scope is not allowed", s);
    }
  }
  const scope = requested
    .filter((s) => allowed.has(s) && (!clientScopes || clientScopes.has(s)))
    .join(" ");

  // The token belongs to a grant of the subject's account to the acting client, as
  // oidc-provider's own grants issue it (lib/actions/grants).
  const grant = new provider.Grant({ accountId: subject.sub, clientId: client.clientId });
  if (scope) grant.addResourceScope(target, scope);
  const grantId = await grant.save();

  const token = new provider.AccessToken({
    accountId: subject.sub,
    client,
    grantId,
    gty: TOKEN_EXCHANGE,
    scope: scope || undefined,
  });
  token.resourceServer = resourceServer;
  exchanged.set(token, {
    sub: subject.sub,
    actor: client.clientId,
    subjectClient: subject.client_id,
  });
  ctx.oidc.entity("AccessToken", token);
  const value = await token.save();

  ctx.body = {
    access_token: value,
    issued_token_type: ACCESS_TOKEN_TYPE,
    token_type: token.tokenType,
    expires_in: token.expiration,
    scope: scope || undefined,
  };
}

provider.registerGrantType(
  TOKEN_EXCHANGE,
  tokenExchange,
  [
    "audience",
    "resource",
    "scope",
    "requested_token_type",
    "subject_token",
    "subject_token_type",
    "actor_token",
    "actor_token_type",
  ],
  ["audience", "resource"],
);

// Errors the provider answers (invalid_client, invalid_grant, ...) go to stderr, for the test's
// log; server_error carries the exception.
provider.on("grant.error", (_ctx, error) => {
  const why = [error.error_description, error.error_detail].filter(Boolean).join(": ");
  process.stderr.write(`idp: token request refused: ${error.message} (${why})\n`);
});
provider.on("server_error", (_ctx, error) => {
  process.stderr.write(`idp: server error: ${error.stack ?? error}\n`);
});

server.on("request", provider.callback());

process.stdout.write(
  `${JSON.stringify({ issuer, port: server.address().port, kids: jwks.keys.map((k) => k.kid) })}\n`,
);
