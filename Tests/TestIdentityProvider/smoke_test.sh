#!/usr/bin/env bash
# Smoke test of tokenbroker-test-idp: starts the built binary on a free port and drives every endpoint with curl.
#
# Build first:  swift build --product tokenbroker-test-idp --scratch-path .build-idp
# Run:          Tests/TestIdentityProvider/smoke_test.sh   (IDP_BIN=/path/to/tokenbroker-test-idp to override)
# Prints "ok - …" / "FAIL - …" lines and "N passed, M failed"; exits 0 only when everything passed.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${IDP_BIN:-$ROOT/.build-idp/debug/tokenbroker-test-idp}
if [ ! -x "$BIN" ]; then
    echo "FAIL - no binary at $BIN (build it with: swift build --product tokenbroker-test-idp --scratch-path .build-idp)"
    echo "0 passed, 1 failed"
    exit 1
fi

WORK=$(mktemp -d)
PID=""
TLS_PID=""
cleanup() {
    if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill -KILL "$PID" 2>/dev/null; fi
    if [ -n "$TLS_PID" ] && kill -0 "$TLS_PID" 2>/dev/null; then kill -KILL "$TLS_PID" 2>/dev/null; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

PASSED=0
FAILED=0
ok() { echo "ok - $1"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL - $1${2:+ ($2)}"; FAILED=$((FAILED + 1)); }
# check NAME COMMAND...: ok when the command succeeds.
check() {
    local name=$1
    shift
    if "$@"; then ok "$name"; else fail "$name"; fi
}

# ---- JSON and JWT helpers (python3 standard library; `cryptography` only if importable) ----
cat >"$WORK/h.py" <<'PY'
import base64, hashlib, json, os, sys, urllib.parse

def b64d(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

def b64e(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

def jwt(token):
    header, payload, _ = token.split(".")
    return json.loads(b64d(header)), json.loads(b64d(payload))

def query(url, name):
    parsed = urllib.parse.urlsplit(url)
    return urllib.parse.parse_qs(parsed.query, keep_blank_values=True).get(name, [None])[0]

def load(path):
    if path == "-":
        return None
    with open(path) as handle:
        text = handle.read()
    try:
        return json.loads(text)
    except ValueError:
        return text

names = {"b64d": b64d, "b64e": b64e, "jwt": jwt, "query": query, "json": json, "os": os}
command = sys.argv[1]
if command == "eval":       # eval FILE EXPR: print EXPR with j = the JSON in FILE
    value = eval(sys.argv[3], dict(names, j=load(sys.argv[2])))
    print(json.dumps(value) if isinstance(value, (dict, list)) else value)
elif command == "test":     # test FILE EXPR: exit 0 when EXPR is true
    sys.exit(0 if eval(sys.argv[3], dict(names, j=load(sys.argv[2]))) else 1)
elif command == "pkce":     # pkce: print a verifier and its S256 challenge
    verifier = b64e(os.urandom(32))
    print(verifier, b64e(hashlib.sha256(verifier.encode()).digest()))
elif command == "verify":   # verify JWT JWKS_FILE: print verified / bad / skipped
    try:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding, rsa
    except ImportError:
        print("skipped")
        sys.exit(0)
    token, keys = sys.argv[2], load(sys.argv[3])["keys"]
    header, _ = jwt(token)
    key = next(k for k in keys if k["kid"] == header["kid"])
    public = rsa.RSAPublicNumbers(
        int.from_bytes(b64d(key["e"]), "big"), int.from_bytes(b64d(key["n"]), "big")
    ).public_key()
    signing_input, signature = token.rsplit(".", 1)
    try:
        public.verify(b64d(signature), signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        print("verified")
    except Exception:
        print("bad")
PY
py() { python3 "$WORK/h.py" "$@"; }
# jtest NAME FILE EXPR: ok when EXPR holds for the JSON in FILE.
jtest() {
    if py test "$2" "$3" 2>"$WORK/pyerr"; then ok "$1"; else fail "$1" "$(head -c 400 "$2" 2>/dev/null)$(cat "$WORK/pyerr")"; fi
}

# ---- start ----
"$BIN" --port 0 --refresh-in 1800 >"$WORK/stdout" 2>"$WORK/stderr" &
PID=$!
for _ in $(seq 1 100); do
    [ -s "$WORK/stdout" ] && break
    sleep 0.1
done
if ! py test "$WORK/stdout" 'isinstance(j, dict) and j["port"] > 0' 2>/dev/null; then
    fail "start-up line" "$(cat "$WORK/stdout" "$WORK/stderr")"
    echo "$PASSED passed, $FAILED failed"
    exit 1
fi
PORT=$(py eval "$WORK/stdout" 'j["port"]')
BASE=$(py eval "$WORK/stdout" 'j["baseURL"]')
TENANT=$(py eval "$WORK/stdout" 'j["tenantId"]')
jtest "start-up line names port, base URL, tenant and authority" "$WORK/stdout" \
    "j['baseURL'] == 'http://127.0.0.1:$PORT' and j['tenantId'] == '7d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a' \
     and j['authority'] == j['baseURL'] + '/' + j['tenantId'] and len(open('$WORK/stdout').read().splitlines()) == 1"

CLIENT_A=aaaaaaaa-0000-4000-8000-00000000000a
CLIENT_B=bbbbbbbb-0000-4000-8000-00000000000b
CLIENT_C=cccccccc-0000-4000-8000-00000000000c
REDIRECT=http://127.0.0.1:9/callback
AUTHORIZE=$BASE/$TENANT/oauth2/v2.0/authorize
TOKEN_URL=$BASE/$TENANT/oauth2/v2.0/token
V1_TOKEN_URL=$BASE/$TENANT/oauth2/token
AUTHORIZE_GETS=0
: >"$WORK/sent" # one line per token request, with its grant type (token() runs in subshells: count in a file)
: >"$WORK/sent1" # the same for the v1 token endpoint
# sent [GRANT] / sent1 [GRANT]: how many v2 / v1 token requests were sent (with that grant type).
sent() { if [ -n "${1:-}" ]; then grep -cx "$1" "$WORK/sent"; else wc -l <"$WORK/sent" | tr -d ' '; fi; }
sent1() { if [ -n "${1:-}" ]; then grep -cx "$1" "$WORK/sent1"; else wc -l <"$WORK/sent1" | tr -d ' '; fi; }

# get NAME URL [curl args]: GET into $WORK/NAME.body / NAME.headers; prints the status.
get() {
    local name=$1 url=$2
    shift 2
    curl -s -o "$WORK/$name.body" -D "$WORK/$name.headers" -w '%{http_code}' "$@" "$url"
}
# token NAME GRANT [curl args]: POST to the token endpoint; prints the status.
token() {
    local name=$1 grant=$2
    shift 2
    echo "$grant" >>"$WORK/sent"
    curl -s -o "$WORK/$name.body" -D "$WORK/$name.headers" -w '%{http_code}' -X POST "$TOKEN_URL" \
        --data-urlencode "grant_type=$grant" "$@"
}
# token1 NAME GRANT [curl args]: POST to the v1 token endpoint (oauth2/token, as ADAL does); prints the status.
token1() {
    local name=$1 grant=$2
    shift 2
    echo "$grant" >>"$WORK/sent1"
    curl -s -o "$WORK/$name.body" -D "$WORK/$name.headers" -w '%{http_code}' -X POST "$V1_TOKEN_URL?api-version=1.0" \
        --data-urlencode "grant_type=$grant" "$@"
}
header() { grep -i "^$2:" "$WORK/$1.headers" | head -n 1 | cut -d' ' -f2- | tr -d '\r'; }
control() { curl -s -o "$WORK/control.body" -w '%{http_code}' -X POST "$BASE/_test/$1" -d "${2:-{\}}"; }

# ---- discovery and keys ----
status=$(get disc "$BASE/$TENANT/v2.0/.well-known/openid-configuration")
jtest "discovery for the tenant" "$WORK/disc.body" \
    "'$status' == '200' and j['issuer'] == '$BASE/$TENANT/v2.0' \
     and j['token_endpoint'] == '$TOKEN_URL' and j['authorization_endpoint'] == '$AUTHORIZE' \
     and j['device_authorization_endpoint'] == '$BASE/$TENANT/oauth2/v2.0/devicecode' \
     and j['jwks_uri'] == '$BASE/$TENANT/discovery/v2.0/keys' and j['code_challenge_methods_supported'] == ['S256'] \
     and j['response_types_supported'] == ['code'] and j['id_token_signing_alg_values_supported'] == ['RS256'] \
     and 'refresh_token' in j['grant_types_supported'] and 'openid' in j['scopes_supported']"
status=$(get disc-common "$BASE/common/v2.0/.well-known/openid-configuration")
jtest "discovery for common has the {tenantid} issuer template" "$WORK/disc-common.body" \
    "'$status' == '200' and j['issuer'] == '$BASE/{tenantid}/v2.0' \
     and j['token_endpoint'] == '$BASE/common/oauth2/v2.0/token'"
status=$(get disc-org "$BASE/organizations/v2.0/.well-known/openid-configuration")
jtest "discovery for organizations" "$WORK/disc-org.body" "'$status' == '200' and '{tenantid}' in j['issuer']"
status=$(get disc-bad "$BASE/contoso.example/v2.0/.well-known/openid-configuration")
jtest "an unknown tenant is invalid_tenant" "$WORK/disc-bad.body" \
    "'$status' == '400' and j['error'] == 'invalid_tenant' and j['error_codes'] == [90002]"
status=$(get jwks "$BASE/$TENANT/discovery/v2.0/keys")
jtest "JWKS has one RSA signing key" "$WORK/jwks.body" \
    "'$status' == '200' and len(j['keys']) == 1 and j['keys'][0]['kty'] == 'RSA' and j['keys'][0]['use'] == 'sig' \
     and j['keys'][0]['alg'] == 'RS256' and j['keys'][0]['kid'] and len(b64d(j['keys'][0]['n'])) == 256 \
     and j['keys'][0]['e'] == 'AQAB'"
KID=$(py eval "$WORK/jwks.body" 'j["keys"][0]["kid"]')

# ---- authorization endpoint ----
# sign_in NAME CLIENT USER: GET the page, POST the username; sets LOCATION, CODE, VERIFIER, NONCE, STATE.
sign_in() {
    local name=$1 client=$2 user=$3
    read -r VERIFIER CHALLENGE < <(py pkce)
    NONCE=nonce-$RANDOM$RANDOM
    STATE=state-$RANDOM$RANDOM
    local query=(--data-urlencode "client_id=$client" --data-urlencode response_type=code
        --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode "scope=openid profile offline_access User.Read"
        --data-urlencode "state=$STATE" --data-urlencode "nonce=$NONCE" --data-urlencode "code_challenge=$CHALLENGE"
        --data-urlencode code_challenge_method=S256 --data-urlencode "login_hint=$user"
        --data-urlencode client_info=1 --data-urlencode prompt=select_account)
    AUTHORIZE_GETS=$((AUTHORIZE_GETS + 1))
    read -r PAGE_STATUS AUTH_URL < <(curl -s -G -o "$WORK/$name-page.body" -w '%{http_code} %{url_effective}\n' \
        "$AUTHORIZE" "${query[@]}")
    # The form has no action: the browser posts to the page's own URL, query included.
    POST_STATUS=$(curl -s -o /dev/null -D "$WORK/$name-post.headers" -w '%{http_code}' -X POST "$AUTH_URL" \
        --data-urlencode "username=$user")
    LOCATION=$(grep -i '^location:' "$WORK/$name-post.headers" | cut -d' ' -f2- | tr -d '\r')
    CODE=$(py eval - "query('$LOCATION', 'code')")
}

sign_in alice "$CLIENT_A" alice@contoso.com
check "authorize GET shows the sign-in form" eval '[ "$PAGE_STATUS" = 200 ] \
    && grep -q "<form method=\"post\">" "$WORK/alice-page.body" \
    && grep -q "name=\"username\" value=\"alice@contoso.com\"" "$WORK/alice-page.body" \
    && grep -q "<button type=\"submit\" name=\"action\" value=\"deny\">" "$WORK/alice-page.body"'
check "authorize POST redirects with code and state" eval '[ "$POST_STATUS" = 302 ] \
    && [ "${LOCATION%%\?*}" = "$REDIRECT" ] && [ -n "$CODE" ] && [ "$CODE" != None ] \
    && [ "$(py eval - "query('"'"'$LOCATION'"'"', '"'"'state'"'"')")" = "$STATE" ]'

DENY_STATUS=$(curl -s -o /dev/null -D "$WORK/deny.headers" -w '%{http_code}' -X POST "$AUTH_URL" -d action=deny)
DENY_LOCATION=$(header deny location)
check "authorize POST action=deny redirects with access_denied" eval '[ "$DENY_STATUS" = 302 ] \
    && [ "$(py eval - "query('"'"'$DENY_LOCATION'"'"', '"'"'error'"'"')")" = access_denied ] \
    && [ "$(py eval - "query('"'"'$DENY_LOCATION'"'"', '"'"'state'"'"')")" = "$STATE" ]'

AUTHORIZE_GETS=$((AUTHORIZE_GETS + 1))
status=$(curl -s -G -o "$WORK/unknown-client.body" -w '%{http_code}' "$AUTHORIZE" \
    --data-urlencode client_id=dddddddd-0000-4000-8000-00000000000d --data-urlencode response_type=code \
    --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode code_challenge=x --data-urlencode code_challenge_method=S256)
check "authorize with an unknown client is a 400 page" eval \
    '[ "$status" = 400 ] && grep -q "AADSTS700016" "$WORK/unknown-client.body"'
AUTHORIZE_GETS=$((AUTHORIZE_GETS + 1))
status=$(curl -s -G -o /dev/null -D "$WORK/no-pkce.headers" -w '%{http_code}' "$AUTHORIZE" \
    --data-urlencode "client_id=$CLIENT_A" --data-urlencode response_type=code \
    --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode state=s1)
NO_PKCE_LOCATION=$(header no-pkce location)
check "authorize without code_challenge redirects with invalid_request" eval '[ "$status" = 302 ] \
    && [ "$(py eval - "query('"'"'$NO_PKCE_LOCATION'"'"', '"'"'error'"'"')")" = invalid_request ]'

# ---- authorization code grant ----
status=$(token wrong-verifier authorization_code --data-urlencode "client_id=$CLIENT_A" \
    --data-urlencode "code=$CODE" --data-urlencode "redirect_uri=$REDIRECT" \
    --data-urlencode "code_verifier=$(py pkce | cut -d' ' -f1)")
jtest "a wrong code_verifier is refused" "$WORK/wrong-verifier.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant' and j['error_description'].startswith( \
     'AADSTS501481: The Code_Verifier does not match the code_challenge supplied in the authorization request.') \
     and j['error_codes'] == [501481] and j['timestamp'] and j['trace_id'] and j['correlation_id']"

status=$(token alice authorization_code -H "client-request-id: 11111111-2222-4333-8444-555555555555" \
    --data-urlencode "client_id=$CLIENT_A" --data-urlencode "code=$CODE" \
    --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode "code_verifier=$VERIFIER" \
    --data-urlencode "scope=openid profile offline_access User.Read" --data-urlencode client_info=1)
jtest "code grant with the right PKCE verifier succeeds" "$WORK/alice.body" \
    "'$status' == '200' and j['token_type'] == 'Bearer' and j['expires_in'] == 3600 \
     and j['ext_expires_in'] == 7200 and j['refresh_in'] == 1800 and len(j['refresh_token']) >= 40 \
     and set(j['scope'].split()) == {'User.Read', 'openid', 'profile', 'offline_access'} \
     and jwt(j['access_token'])[1]['tid'] == '$TENANT'"
check "client-request-id is echoed as a header" \
    eval '[ "$(header alice client-request-id)" = 11111111-2222-4333-8444-555555555555 ]'
jtest "client_info is base64url {uid, utid}" "$WORK/alice.body" \
    "json.loads(b64d(j['client_info']))['utid'] == '$TENANT' \
     and json.loads(b64d(j['client_info']))['uid'] == jwt(j['id_token'])[1]['oid']"
jtest "a family client gets foci 1" "$WORK/alice.body" "j.get('foci') == '1'"
jtest "id_token claims: iss, aud, nonce, tid, names, times" "$WORK/alice.body" \
    "jwt(j['id_token'])[0] == {'typ': 'JWT', 'alg': 'RS256', 'kid': '$KID'} \
     and (lambda c: c['iss'] == '$BASE/$TENANT/v2.0' and c['aud'] == '$CLIENT_A' and c['nonce'] == '$NONCE' \
          and c['tid'] == '$TENANT' and c['preferred_username'] == 'alice@contoso.com' and c['name'] == 'Alice' \
          and c['exp'] - c['iat'] == 3600 and c['nbf'] <= c['iat'] and c['sub'])(jwt(j['id_token'])[1])"
SIGNATURE=$(py verify "$(py eval "$WORK/alice.body" 'j["id_token"]')" "$WORK/jwks.body")
case $SIGNATURE in
verified) ok "id_token signature verifies against the JWKS" ;;
skipped) ok "id_token signature not checked (python cryptography not installed)" ;;
*) fail "id_token signature verifies against the JWKS" "$SIGNATURE" ;;
esac
RT1=$(py eval "$WORK/alice.body" 'j["refresh_token"]')
AT1=$(py eval "$WORK/alice.body" 'j["access_token"]')
ALICE_OID=$(py eval "$WORK/alice.body" 'jwt(j["id_token"])[1]["oid"]')

status=$(token reuse-code authorization_code --data-urlencode "client_id=$CLIENT_A" --data-urlencode "code=$CODE" \
    --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode "code_verifier=$VERIFIER")
jtest "an authorization code is single use" "$WORK/reuse-code.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant'"

# ---- refresh token rotation and reuse detection ----
status=$(token refresh1 refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=$RT1" \
    --data-urlencode "scope=User.Read offline_access" --data-urlencode client_info=1)
jtest "refresh rotates the refresh token and issues a new access token" "$WORK/refresh1.body" \
    "'$status' == '200' and j['refresh_token'] != '$RT1' and j['access_token'] != '$AT1' and j['foci'] == '1' \
     and 'nonce' not in jwt(j['id_token'])[1] and jwt(j['id_token'])[1]['oid'] == '$ALICE_OID'"
RT2=$(py eval "$WORK/refresh1.body" 'j["refresh_token"]')
status=$(token refresh-old refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=$RT1")
jtest "the rotated refresh token is refused (invalid_grant, bad_token)" "$WORK/refresh-old.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant' and j['suberror'] == 'bad_token' \
     and 'reuse' in j['error_description']"
status=$(token refresh-new refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=$RT2")
jtest "reuse detection revoked the newer refresh token too" "$WORK/refresh-new.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant'"

# ---- family refresh tokens ----
sign_in bob "$CLIENT_A" bob@contoso.com
status=$(token bob authorization_code --data-urlencode "client_id=$CLIENT_A" --data-urlencode "code=$CODE" \
    --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode "code_verifier=$VERIFIER")
BOB_RT=$(py eval "$WORK/bob.body" 'j["refresh_token"]')
status=$(token frt-b refresh_token --data-urlencode "client_id=$CLIENT_B" --data-urlencode "refresh_token=$BOB_RT" \
    --data-urlencode "scope=https://graph.microsoft.com/.default")
jtest "an FRT is redeemed by the second family client" "$WORK/frt-b.body" \
    "'$status' == '200' and j['foci'] == '1' and jwt(j['id_token'])[1]['aud'] == '$CLIENT_B' \
     and 'https://graph.microsoft.com/.default' in j['scope'].split() \
     and jwt(j['access_token'])[1]['aud'] == 'https://graph.microsoft.com'"
BOB_RT2=$(py eval "$WORK/frt-b.body" 'j["refresh_token"]')
status=$(token frt-c refresh_token --data-urlencode "client_id=$CLIENT_C" --data-urlencode "refresh_token=$BOB_RT2")
jtest "an FRT redeemed by the non-family client is client_mismatch" "$WORK/frt-c.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant' and j['suberror'] == 'client_mismatch' \
     and j['error_codes'] == [70000] and j['error_description'].startswith('AADSTS70000:')"
status=$(token frt-b-again refresh_token --data-urlencode "client_id=$CLIENT_A" \
    --data-urlencode "refresh_token=$BOB_RT2")
jtest "client_mismatch does not spend the FRT" "$WORK/frt-b-again.body" "'$status' == '200'"

sign_in carol "$CLIENT_C" carol@contoso.com
status=$(token carol authorization_code --data-urlencode "client_id=$CLIENT_C" --data-urlencode "code=$CODE" \
    --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode "code_verifier=$VERIFIER")
jtest "a non-family client gets no foci" "$WORK/carol.body" "'$status' == '200' and 'foci' not in j"
CAROL_RT=$(py eval "$WORK/carol.body" 'j["refresh_token"]')
status=$(token carol-by-a refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=$CAROL_RT")
jtest "another client redeeming a non-family RT is client_mismatch" "$WORK/carol-by-a.body" \
    "'$status' == '400' and j['suberror'] == 'client_mismatch'"
status=$(token unknown-client refresh_token --data-urlencode client_id=dddddddd-0000-4000-8000-00000000000d \
    --data-urlencode "refresh_token=$CAROL_RT")
jtest "an unknown client is invalid_client (AADSTS700016)" "$WORK/unknown-client.body" \
    "'$status' == '400' and j['error'] == 'invalid_client' and j['error_codes'] == [700016]"
status=$(token unsupported password --data-urlencode "client_id=$CLIENT_A")
jtest "an unsupported grant is unsupported_grant_type" "$WORK/unsupported.body" \
    "'$status' == '400' and j['error'] == 'unsupported_grant_type'"

# ---- revoke and expire through the test API ----
status=$(control revoke '{"username":"Carol@Contoso.com"}')
status=$(token carol-revoked refresh_token --data-urlencode "client_id=$CLIENT_C" --data-urlencode "refresh_token=$CAROL_RT")
jtest "/_test/revoke revokes the user's refresh tokens" "$WORK/carol-revoked.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant'"
status=$(control expire-refresh-tokens '{"username":"bob@contoso.com"}')
BOB_RT3=$(py eval "$WORK/frt-b-again.body" 'j["refresh_token"]')
status=$(token bob-expired refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=$BOB_RT3")
jtest "/_test/expire-refresh-tokens gives token_expired" "$WORK/bob-expired.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant' and j['suberror'] == 'token_expired'"

# ---- v1 token endpoint (ADAL): resource instead of scope, one refresh-token store with v2 ----
ARM=https://management.core.windows.net/
sign_in erin "$CLIENT_A" erin@contoso.com
status=$(token1 v1-no-resource authorization_code -H "client-request-id: 22222222-2222-4333-8444-555555555555" \
    --data-urlencode "client_id=$CLIENT_A" --data-urlencode "code=$CODE" --data-urlencode "redirect_uri=$REDIRECT" \
    --data-urlencode "code_verifier=$VERIFIER")
jtest "v1 without resource is invalid_request (AADSTS50001), Entra-shaped" "$WORK/v1-no-resource.body" \
    "'$status' == '400' and j['error'] == 'invalid_request' and j['error_codes'] == [50001] \
     and j['error_description'].startswith('AADSTS50001:') and 'resource' in j['error_description'] \
     and j['correlation_id'] == '22222222-2222-4333-8444-555555555555' and j['trace_id'] and j['timestamp']"
status=$(token1 v1-wrong-verifier authorization_code --data-urlencode "client_id=$CLIENT_A" \
    --data-urlencode "code=$CODE" --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode "resource=$ARM" \
    --data-urlencode "code_verifier=$(py pkce | cut -d' ' -f1)")
jtest "v1 code grant checks the PKCE verifier as v2 does" "$WORK/v1-wrong-verifier.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant' and j['error_codes'] == [501481]"
status=$(token1 v1-code authorization_code --data-urlencode "client_id=$CLIENT_A" --data-urlencode "code=$CODE" \
    --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode "resource=$ARM" --data-urlencode "code_verifier=$VERIFIER")
jtest "v1 code grant (v2 authorize code + resource): the v1 body, numbers as strings" "$WORK/v1-code.body" \
    "'$status' == '200' and j['token_type'] == 'Bearer' and j['scope'] == 'user_impersonation' \
     and j['expires_in'] == '3600' and j['ext_expires_in'] == '7200' and j['resource'] == '$ARM' \
     and int(j['expires_on']) - int(j['not_before']) == 3600 and j['foci'] == '1' and len(j['refresh_token']) >= 40 \
     and 'client_info' not in j and 'refresh_in' not in j \
     and jwt(j['access_token'])[0]['alg'] == 'RS256' and jwt(j['access_token'])[1]['aud'] == '$ARM'"
jtest "v1 id_token is unsigned (alg none, empty signature) with v1 claims" "$WORK/v1-code.body" \
    "j['id_token'].endswith('.') and j['id_token'].count('.') == 2 \
     and jwt(j['id_token'])[0] == {'typ': 'JWT', 'alg': 'none'} \
     and (lambda c: c['aud'] == '$CLIENT_A' and c['iss'] == '$BASE/$TENANT/' and c['ver'] == '1.0' \
          and c['upn'] == 'erin@contoso.com' and c['unique_name'] == 'erin@contoso.com' and c['name'] == 'Erin' \
          and c['given_name'] == 'Erin' and c['family_name'] == 'Tester' and c['tid'] == '$TENANT' and c['oid'] \
          and c['sub'] and c['exp'] - c['iat'] == 3600 and c['nbf'] == c['iat'])(jwt(j['id_token'])[1])"
V1_RT1=$(py eval "$WORK/v1-code.body" 'j["refresh_token"]')
status=$(token1 v1-refresh refresh_token --data-urlencode "client_id=$CLIENT_B" \
    --data-urlencode "refresh_token=$V1_RT1" --data-urlencode resource=https://graph.microsoft.com \
    --data-urlencode client_info=1)
jtest "v1 refresh for another resource (MRRT, by the other family client)" "$WORK/v1-refresh.body" \
    "'$status' == '200' and j['resource'] == 'https://graph.microsoft.com' and j['refresh_token'] != '$V1_RT1' \
     and jwt(j['access_token'])[1]['aud'] == 'https://graph.microsoft.com' and j['foci'] == '1' \
     and jwt(j['id_token'])[1]['aud'] == '$CLIENT_B' and json.loads(b64d(j['client_info']))['utid'] == '$TENANT'"
V1_RT2=$(py eval "$WORK/v1-refresh.body" 'j["refresh_token"]')
status=$(token1 v1-refresh-no-resource refresh_token --data-urlencode "client_id=$CLIENT_A" \
    --data-urlencode "refresh_token=$V1_RT2")
jtest "v1 refresh without resource is invalid_request and spends nothing" "$WORK/v1-refresh-no-resource.body" \
    "'$status' == '400' and j['error'] == 'invalid_request' and j['error_codes'] == [50001]"
status=$(token1 v1-device urn:ietf:params:oauth:grant-type:device_code --data-urlencode "client_id=$CLIENT_A" \
    --data-urlencode device_code=x --data-urlencode "resource=$ARM")
jtest "v1 redeems only the code and refresh grants" "$WORK/v1-device.body" \
    "'$status' == '400' and j['error'] == 'unsupported_grant_type'"
status=$(token v1-rt-at-v2 refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=$V1_RT2" \
    --data-urlencode "scope=https://other.example/.default offline_access")
jtest "a v1 refresh token is redeemed at v2 for any other scope" "$WORK/v1-rt-at-v2.body" \
    "'$status' == '200' and 'https://other.example/.default' in j['scope'].split() \
     and jwt(j['access_token'])[1]['aud'] == 'https://other.example' and jwt(j['id_token'])[0]['alg'] == 'RS256'"
V2_RT=$(py eval "$WORK/v1-rt-at-v2.body" 'j["refresh_token"]')
status=$(token1 v2-rt-at-v1 refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=$V2_RT" \
    --data-urlencode "resource=$ARM")
jtest "a v2 refresh token is redeemed at v1" "$WORK/v2-rt-at-v1.body" \
    "'$status' == '200' and j['resource'] == '$ARM' and jwt(j['access_token'])[1]['aud'] == '$ARM'"
status=$(token1 v1-reuse refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=$V1_RT1" \
    --data-urlencode "resource=$ARM")
jtest "v1 shares rotation and reuse detection with v2 (bad_token)" "$WORK/v1-reuse.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant' and j['suberror'] == 'bad_token'"
V1_RT3=$(py eval "$WORK/v2-rt-at-v1.body" 'j["refresh_token"]')
status=$(token v1-revoked-at-v2 refresh_token --data-urlencode "client_id=$CLIENT_A" \
    --data-urlencode "refresh_token=$V1_RT3")
jtest "reuse at v1 revoked the user's newest refresh token at v2 too" "$WORK/v1-revoked-at-v2.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant' and j['error_codes'] == [50173]"

# ---- device code flow ----
status=$(curl -s -o "$WORK/devicecode.body" -w '%{http_code}' -X POST "$BASE/$TENANT/oauth2/v2.0/devicecode" \
    --data-urlencode "client_id=$CLIENT_C" --data-urlencode "scope=openid offline_access api://test/Data.Read")
jtest "devicecode issues device_code, user_code and message" "$WORK/devicecode.body" \
    "'$status' == '200' and len(j['user_code']) == 8 and j['user_code'].isupper() and j['user_code'].isalnum() \
     and j['verification_uri'] == '$BASE/devicelogin' and j['interval'] == 1 and j['expires_in'] == 600 \
     and j['message'] == 'To sign in, use a web browser to open the page $BASE/devicelogin and enter the code ' \
        + j['user_code'] + ' to authenticate.'"
DEVICE_CODE=$(py eval "$WORK/devicecode.body" 'j["device_code"]')
USER_CODE=$(py eval "$WORK/devicecode.body" 'j["user_code"]')
poll() { token "$1" urn:ietf:params:oauth:grant-type:device_code --data-urlencode "client_id=$CLIENT_C" \
    --data-urlencode "device_code=$DEVICE_CODE" --data-urlencode client_info=1; }
status=$(poll poll1)
jtest "device code poll before approval: authorization_pending" "$WORK/poll1.body" \
    "'$status' == '400' and j['error'] == 'authorization_pending'"
status=$(poll poll2)
jtest "polling sooner than the interval: slow_down" "$WORK/poll2.body" \
    "'$status' == '400' and j['error'] == 'slow_down'"
status=$(get devicelogin "$BASE/devicelogin?otc=$USER_CODE")
check "GET /devicelogin shows the code form" eval '[ "$status" = 200 ] \
    && grep -q "name=\"user_code\" value=\"$USER_CODE\"" "$WORK/devicelogin.body" \
    && grep -q "name=\"username\"" "$WORK/devicelogin.body"'
status=$(control device "{\"userCode\":\"$USER_CODE\",\"username\":\"dave@contoso.com\",\"action\":\"approve\"}")
jtest "/_test/device approves the code" "$WORK/control.body" "'$status' == '200' and j['ok'] is True"
sleep 1.1
status=$(poll poll3)
jtest "device code poll after approval gets tokens" "$WORK/poll3.body" \
    "'$status' == '200' and jwt(j['id_token'])[1]['preferred_username'] == 'dave@contoso.com' \
     and jwt(j['id_token'])[1]['aud'] == '$CLIENT_C' and 'foci' not in j \
     and json.loads(b64d(j['client_info']))['utid'] == '$TENANT' and 'api://test/Data.Read' in j['scope'].split() \
     and jwt(j['access_token'])[1]['aud'] == 'api://test' and jwt(j['access_token'])[1]['scp'] == 'Data.Read'"
sleep 1.1
status=$(poll poll4)
jtest "a redeemed device code cannot be redeemed again" "$WORK/poll4.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant'"
status=$(curl -s -o "$WORK/devicecode2.body" -w '%{http_code}' -X POST "$BASE/$TENANT/oauth2/v2.0/devicecode" \
    --data-urlencode "client_id=$CLIENT_A" --data-urlencode "scope=User.Read")
DEVICE_CODE=$(py eval "$WORK/devicecode2.body" 'j["device_code"]')
USER_CODE=$(py eval "$WORK/devicecode2.body" 'j["user_code"]')
status=$(curl -s -o "$WORK/devicelogin-deny.body" -w '%{http_code}' -X POST "$BASE/devicelogin" \
    --data-urlencode "user_code=$USER_CODE" --data-urlencode action=deny)
status=$(token deny-poll urn:ietf:params:oauth:grant-type:device_code --data-urlencode "client_id=$CLIENT_A" \
    --data-urlencode "device_code=$DEVICE_CODE")
jtest "a device code denied on /devicelogin: access_denied" "$WORK/deny-poll.body" \
    "'$status' == '400' and j['error'] == 'access_denied'"

# ---- fault injection ----
status=$(control fail-next '{"count":1,"status":503,"error":"temporarily_unavailable","retryAfter":7}')
jtest "/_test/fail-next queues a fault" "$WORK/control.body" "'$status' == '200' and j['faultsLeft'] == 1"
status=$(token fault503 refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=x" \
    -H "client-request-id: 99999999-2222-4333-8444-555555555555")
jtest "an injected 503 is Entra-shaped" "$WORK/fault503.body" \
    "'$status' == '503' and j['error'] == 'temporarily_unavailable' and j['error_codes'] \
     and j['correlation_id'] == '99999999-2222-4333-8444-555555555555'"
check "an injected 503 carries Retry-After" eval '[ "$(header fault503 retry-after)" = 7 ]'
status=$(control fail-next '{"status":429,"error":"temporarily_unavailable","retryAfter":2,"grantType":"refresh_token"}')
status=$(token not-faulted authorization_code --data-urlencode "client_id=$CLIENT_A" --data-urlencode code=nope \
    --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode code_verifier=nope)
jtest "a fault for another grant type leaves this request alone" "$WORK/not-faulted.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant'"
status=$(token fault429 refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=x")
check "an injected 429 with Retry-After" eval '[ "$status" = 429 ] && [ "$(header fault429 retry-after)" = 2 ]'
status=$(control fail-next '{"status":400,"error":"invalid_grant","suberror":"bad_token","errorDescription":"AADSTS70000: injected"}')
status=$(token fault-suberror refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=x")
jtest "an injected invalid_grant with suberror and description" "$WORK/fault-suberror.body" \
    "'$status' == '400' and j['suberror'] == 'bad_token' and j['error_description'] == 'AADSTS70000: injected' \
     and j['error_codes'] == [70000]"
status=$(control fail-next '{"status":200,"delayMs":700}')
START=$(date +%s%N)
status=$(token slow refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=$BOB_RT3")
ELAPSED_MS=$((($(date +%s%N) - START) / 1000000))
jtest "a status-200 fault answers normally, ${ELAPSED_MS} ms later" "$WORK/slow.body" \
    "'$status' == '400' and j['suberror'] == 'token_expired' and $ELAPSED_MS >= 700"

# 50 concurrent token requests while every answer is delayed: delays must not serialize. The provider says how many
# answers waited at once; how long the whole took is shown, not judged (a loaded machine starts 50 curls slowly).
status=$(control delay '{"ms":800}')
START=$(date +%s%N)
CURLS=()
for i in $(seq 1 50); do
    curl -s -o "$WORK/concurrent-$i.body" -w '%{http_code}\n' -X POST "$TOKEN_URL" -d grant_type=refresh_token \
        -d "client_id=$CLIENT_A" -d "refresh_token=unknown-$i" >"$WORK/concurrent-$i.status" &
    CURLS+=($!)
done
wait "${CURLS[@]}"
ELAPSED_MS=$((($(date +%s%N) - START) / 1000000))
for _ in $(seq 1 50); do echo refresh_token >>"$WORK/sent"; done
CONCURRENT_400=$(cat "$WORK"/concurrent-*.status | grep -c '^400$')
check "50 concurrent delayed refreshes all answered, after at least the delay (${ELAPSED_MS} ms)" \
    eval '[ "$CONCURRENT_400" = 50 ] && [ "$ELAPSED_MS" -ge 800 ]'
status=$(get delay-stats "$BASE/_test/stats")
jtest "/_test/stats says the delay in force" "$WORK/delay-stats.body" "'$status' == '200' and j['tokenDelayMs'] == 800"
jtest "delayed answers waited side by side ($(py eval "$WORK/delay-stats.body" 'j["peakDelayedAnswers"]') at once)" \
    "$WORK/delay-stats.body" "j['peakDelayedAnswers'] >= 2"
status=$(control reset)
# What the reset changed is read from the provider's state, not from how fast the next answer came.
status=$(get reset-stats "$BASE/_test/stats")
jtest "/_test/reset clears the delay" "$WORK/reset-stats.body" "'$status' == '200' and j['tokenDelayMs'] == 0"
status=$(token after-reset refresh_token --data-urlencode "client_id=$CLIENT_A" --data-urlencode "refresh_token=x")
check "a token request after the reset is answered" eval '[ "$status" = 400 ]'

# A held answer waits for the release, however long: the stats say it is held (the event waited for) before it goes.
status=$(control hold)
curl -s -o "$WORK/held.body" -w '%{http_code}\n' -X POST "$TOKEN_URL" -d grant_type=refresh_token \
    -d "client_id=$CLIENT_A" -d "refresh_token=held" >"$WORK/held.status" &
HELD=$!
echo refresh_token >>"$WORK/sent"
for _ in $(seq 1500); do
    status=$(get hold-stats "$BASE/_test/stats")
    py test "$WORK/hold-stats.body" "j['heldAnswers'] == 1" 2>/dev/null && break
    sleep 0.02
done
jtest "/_test/hold holds a token answer" "$WORK/hold-stats.body" "'$status' == '200' and j['heldAnswers'] == 1"
check "a held answer is not given before the release" eval '[ ! -s "$WORK/held.status" ]'
status=$(control release)
wait "$HELD"
check "/_test/release lets it go" eval '[ "$(cat "$WORK/held.status")" = 400 ]'

# ---- forged id tokens ----
FORGED_OID=0000e7e7-0000-4000-8000-00000000e7e7
status=$(control forge-id-tokens "{\"count\":1,\"objectId\":\"$FORGED_OID\"}")
jtest "/_test/forge-id-tokens queues one forgery" "$WORK/control.body" "'$status' == '200' and j['count'] == 1"
sign_in carol "$CLIENT_A" carol@contoso.com
status=$(token carol authorization_code --data-urlencode "client_id=$CLIENT_A" --data-urlencode "code=$CODE" \
    --data-urlencode "redirect_uri=$REDIRECT" --data-urlencode "code_verifier=$VERIFIER")
jtest "a forged id_token keeps the provider's kid and names the objectId given" "$WORK/carol.body" \
    "'$status' == '200' and jwt(j['id_token'])[0]['kid'] == '$KID' \
     and jwt(j['id_token'])[1]['oid'] == '$FORGED_OID' and jwt(j['id_token'])[1]['sub'] == '$FORGED_OID'"
case $(py verify "$(py eval "$WORK/carol.body" 'j["id_token"]')" "$WORK/jwks.body") in
bad) ok "a forged id_token's signature does not verify against the JWKS" ;;
skipped) ok "a forged id_token's signature not checked (python cryptography not installed)" ;;
*) fail "a forged id_token's signature does not verify against the JWKS" "verified" ;;
esac
status=$(token carol-refresh refresh_token --data-urlencode "client_id=$CLIENT_A" \
    --data-urlencode "refresh_token=$(py eval "$WORK/carol.body" 'j["refresh_token"]')")
case $(py verify "$(py eval "$WORK/carol-refresh.body" 'j["id_token"]')" "$WORK/jwks.body") in
verified | skipped) ok "the forgery was used up: the next id_token is the provider's" ;;
*) fail "the forgery was used up: the next id_token is the provider's" "status $status" ;;
esac

# ---- stats ----
status=$(get stats "$BASE/_test/stats")
jtest "/_test/stats counts every request ($(sent) token, $AUTHORIZE_GETS authorize, 2 device code)" \
    "$WORK/stats.body" \
    "'$status' == '200' and j['tokenRequests'] == $(sent) and j['authorizeRequests'] == $AUTHORIZE_GETS \
     and j['deviceCodeRequests'] == 2 and j['faultsLeft'] == 0 \
     and j['byGrant']['authorization_code'] == $(sent authorization_code) \
     and j['byGrant']['refresh_token'] == $(sent refresh_token) \
     and j['byGrant']['urn:ietf:params:oauth:grant-type:device_code'] \
         == $(sent urn:ietf:params:oauth:grant-type:device_code)"
jtest "/_test/stats times the v2.0 token answers, at the server's edge no shorter than in the endpoint" \
    "$WORK/stats.body" "j['tokenServedMicroseconds'] >= j['tokenAnswerMicroseconds'] > 0"
jtest "/_test/stats counts the v1 token endpoint apart ($(sent1) requests)" "$WORK/stats.body" \
    "j['v1TokenRequests'] == $(sent1) and j['v1ByGrant']['authorization_code'] == $(sent1 authorization_code) \
     and j['v1ByGrant']['refresh_token'] == $(sent1 refresh_token) \
     and j['v1ByGrant']['urn:ietf:params:oauth:grant-type:device_code'] \
         == $(sent1 urn:ietf:params:oauth:grant-type:device_code)"

# ---- shutdown ----
kill -TERM "$PID"
EXIT_CODE=""
for _ in $(seq 1 50); do
    if ! kill -0 "$PID" 2>/dev/null; then
        wait "$PID"
        EXIT_CODE=$?
        break
    fi
    sleep 0.1
done
check "SIGTERM stops the provider with exit status 0" eval '[ "$EXIT_CODE" = 0 ]'
PID=""
check "standard output held only the start-up line" eval '[ "$(wc -l <"$WORK/stdout")" = 1 ]'

# ---- TLS: --tls-certificate-out ----
CERT=$WORK/tls/idp.pem
mkdir -p "$WORK/tls"
"$BIN" --port 0 --tls-certificate-out "$CERT" >"$WORK/tls-stdout" 2>"$WORK/tls-stderr" &
TLS_PID=$!
for _ in $(seq 1 100); do
    [ -s "$WORK/tls-stdout" ] && break
    sleep 0.1
done
# The certificate must be in place as soon as the line is there: look at once.
CERT_AT_START=$([ -s "$CERT" ] && echo yes || echo no)
TLS_PORT=$(py eval "$WORK/tls-stdout" 'j["port"]' 2>/dev/null)
TLS_BASE=https://127.0.0.1:$TLS_PORT
jtest "with TLS, the start-up line names https base URL and authority" "$WORK/tls-stdout" \
    "j['baseURL'] == '$TLS_BASE' and j['authority'] == '$TLS_BASE/' + j['tenantId'] and j['port'] > 0"
check "the certificate PEM is written (0644) before the start-up line" eval '[ "$CERT_AT_START" = yes ] \
    && [ "$(stat -c %a "$CERT")" = 644 ] && grep -q "BEGIN CERTIFICATE" "$CERT"'
if command -v openssl >/dev/null; then
    openssl x509 -in "$CERT" -noout -text >"$WORK/tls-cert.txt" 2>&1
    check "certificate: CN, SANs, CA:TRUE, key usages, key identifiers, P-256" eval \
        'grep -q "Subject: CN *= *tokenbroker-test-idp" "$WORK/tls-cert.txt" \
        && grep -q "IP Address:127.0.0.1" "$WORK/tls-cert.txt" && grep -q "DNS:localhost" "$WORK/tls-cert.txt" \
        && grep -A1 "Basic Constraints: critical" "$WORK/tls-cert.txt" | grep -q "CA:TRUE" \
        && grep -A1 "Key Usage: critical" "$WORK/tls-cert.txt" | grep -q "Digital Signature, Certificate Sign" \
        && grep -A1 "Extended Key Usage" "$WORK/tls-cert.txt" | grep -q "TLS Web Server Authentication" \
        && grep -q "Subject Key Identifier" "$WORK/tls-cert.txt" \
        && grep -q "Authority Key Identifier" "$WORK/tls-cert.txt" && grep -q "P-256" "$WORK/tls-cert.txt"'
    NOT_BEFORE=$(date -d "$(openssl x509 -in "$CERT" -noout -startdate | cut -d= -f2)" +%s)
    NOT_AFTER=$(date -d "$(openssl x509 -in "$CERT" -noout -enddate | cut -d= -f2)" +%s)
    check "certificate: valid from an hour ago for seven days" eval \
        '[ $(($(date +%s) - NOT_BEFORE)) -ge 3600 ] && [ $(($(date +%s) - NOT_BEFORE)) -lt 3660 ] \
        && [ $((NOT_AFTER - NOT_BEFORE)) = $((7 * 86400 + 3600)) ]'
else
    ok "certificate contents not checked (no openssl)"
fi
status=$(curl -s --cacert "$CERT" -o "$WORK/tls-disc.body" -w '%{http_code}' \
    "$TLS_BASE/$TENANT/v2.0/.well-known/openid-configuration")
jtest "curl --cacert <the PEM> gets discovery over HTTPS, with https endpoints" "$WORK/tls-disc.body" \
    "'$status' == '200' and j['issuer'] == '$TLS_BASE/$TENANT/v2.0' \
     and j['token_endpoint'] == '$TLS_BASE/$TENANT/oauth2/v2.0/token'"
status=$(curl -s --cacert "$CERT" -o "$WORK/tls-v1.body" -w '%{http_code}' -X POST \
    "https://localhost:$TLS_PORT/$TENANT/oauth2/token" -d grant_type=refresh_token -d "client_id=$CLIENT_A" \
    -d refresh_token=unknown -d "resource=$ARM")
jtest "HTTPS by the name localhost reaches the v1 token endpoint" "$WORK/tls-v1.body" \
    "'$status' == '400' and j['error'] == 'invalid_grant'"
curl -s -o /dev/null "$TLS_BASE/_test/stats"
PLAIN_RC=$?
check "curl without the certificate refuses the server (exit $PLAIN_RC)" eval '[ "$PLAIN_RC" = 60 ]'
curl -s -m 5 -o /dev/null "http://127.0.0.1:$TLS_PORT/_test/stats"
HTTP_RC=$?
check "plain HTTP to the TLS port gets no answer (exit $HTTP_RC)" eval '[ "$HTTP_RC" != 0 ]'
cat >"$WORK/strict.py" <<'PY'
import socket, ssl, sys
port, cafile = int(sys.argv[1]), sys.argv[2]
context = ssl.create_default_context(cafile=cafile)
context.verify_flags |= ssl.VERIFY_X509_STRICT  # the default from Python 3.13 on
for name in ("127.0.0.1", "localhost"):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=name) as tls:
            tls.sendall(b"GET /_test/stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert tls.recv(12) == b"HTTP/1.1 200", name
PY
check "Python ssl with the PEM as cafile and VERIFY_X509_STRICT accepts 127.0.0.1 and localhost" \
    python3 "$WORK/strict.py" "$TLS_PORT" "$CERT"
kill -TERM "$TLS_PID"
TLS_EXIT=""
for _ in $(seq 1 50); do
    if ! kill -0 "$TLS_PID" 2>/dev/null; then
        wait "$TLS_PID"
        TLS_EXIT=$?
        break
    fi
    sleep 0.1
done
check "SIGTERM stops the TLS provider with exit status 0" eval '[ "$TLS_EXIT" = 0 ]'
TLS_PID=""

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
