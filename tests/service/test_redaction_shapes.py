"""Redaction by structure: each shape credentials travel in, and exactly what is left of it.

The shapes are the ones exceptions and logged requests really have: JSON bodies (and JSON inside a
JSON string), Python dict, tuple and kwargs reprs in either quote style and as bytes, form bodies,
header blocks, URLs and the HTTP auth schemes. Each row gives the whole text that must remain, so
a rule that eats too much fails here as surely as one that misses.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from writesafe.reconciler._redaction import REDACTED, redact_text

R = REDACTED
B64 = "YWxpY2U6aHVudGVyMg=="  # alice:hunter2

SHAPES = [
    # The issue's own shape: a dict repr, single quotes, Basic credentials.
    (
        f"{{'Authorization': 'Basic {B64}', 'X-Api-Key': 'key_live_123', 'password': 'hunter2'}}",
        f"{{'Authorization': '{R}', 'X-Api-Key': '{R}', 'password': '{R}'}}",
    ),
    (
        f'{{"Authorization": "Basic {B64}", "password": "hunter2", "user": "alice"}}',
        f'{{"Authorization": "{R}", "password": "{R}", "user": "alice"}}',
    ),
    (
        "{'headers': {'authorization': 'Bearer abc.def.ghi'}, 'status': 401}",
        f"{{'headers': {{'authorization': '{R}'}}, 'status': 401}}",
    ),
    (
        f"[('Authorization', 'Basic {B64}'), ('Accept', 'application/json')]",
        f"[('Authorization', '{R}'), ('Accept', 'application/json')]",
    ),
    (
        "[(b'authorization', b'Bearer tok123'), (b'host', b'api.test')]",
        f"[(b'authorization', b'{R}'), (b'host', b'api.test')]",
    ),
    (
        "Headers({'x-api-key': 'key_live_123', 'accept': '*/*'})",
        f"Headers({{'x-api-key': '{R}', 'accept': '*/*'}})",
    ),
    ("{b'password': b'hunter2'}", f"{{b'password': b'{R}'}}"),
    ("""body b'{"token": "tok-9f8e7d"}' rejected""", f"""body b'{{"token": "{R}"}}' rejected"""),
    (
        '{"body": "{\\"password\\": \\"hunter2\\", \\"user\\": \\"bob\\"}"}',
        f'{{"body": "{{\\"password\\": \\"{R}\\", \\"user\\": \\"bob\\"}}"}}',
    ),
    ("{'auth': {'user': 'a', 'password': 'b'}}", f"{{'auth': {{'user': 'a', 'password': '{R}'}}}}"),
    ('("token", "tok-123")', f'("token", "{R}")'),
    ("{'client_secret': 'it has spaces in it', 'n': 1}", f"{{'client_secret': '{R}', 'n': 1}}"),
    ("{'password': \"it's here\"}", f"{{'password': \"{R}\"}}"),
    ("'Authorization':'Bearer x1'", f"'Authorization':'{R}'"),
    # Python kwargs reprs.
    (
        "connect(host='db', password='hunter2', port=5432)",
        f"connect(host='db', password='{R}', port=5432)",
    ),
    ('Config(api_key="key_live_123", timeout=5)', f'Config(api_key="{R}", timeout=5)'),
    ("proxy_authorization='Basic dXNlcjpwYXNz'", f"proxy_authorization='{R}'"),
    # Form-encoded bodies.
    (
        "grant_type=password&username=bob&password=hunter2&client_secret=s3cr3t",
        f"grant_type=password&username=bob&password={R}&client_secret={R}",
    ),
    ("password=hunter2&user=bob", f"password={R}&user=bob"),
    # Header lines, alone and in a block.
    (f"Authorization: Basic {B64}", f"Authorization: {R}"),
    ("X-Api-Key: key_live_123", f"X-Api-Key: {R}"),
    ("Cookie: sid=abc123; theme=dark", f"Cookie: {R}"),
    ("set-cookie: session=abc123; HttpOnly", f"set-cookie: {R}"),
    (
        'GET /v1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Digest username="bob", '
        'realm="api", nonce="dcd98b", response="6629fae4"\r\nAccept: */*',
        f"GET /v1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: {R}\r\nAccept: */*",
    ),
    ("password: hunter2", f"password: {R}"),
    # Auth schemes wherever they stand.
    ("refused: Token 9944b09199c62bcf9418ad846dd0e", f"refused: Token {R}"),
    (f"the gateway said Basic {B64} is wrong", f"the gateway said Basic {R} is wrong"),
    ("Bearer abc.def failed", f"Bearer {R} failed"),
    ('Digest username="bob", response="6629fae49393a0539745" rejected', f"Digest {R} rejected"),
    # URLs: userinfo, query strings, fragments.
    ("https://alice:hunter2@api.test/v1/charges", f"https://{R}@api.test/v1/charges"),
    (
        "https://api.test/v1/x?sig=abc123&expires=99 returned 403",
        f"https://api.test/v1/x?{R} returned 403",
    ),
    ("GET https://api.test/cb#access_token=abc123 failed", f"GET https://api.test/cb#{R} failed"),
    ("redis://:s3cr3t@cache.test:6379/0", f"redis://{R}@cache.test:6379/0"),
    # Token-shaped values.
    ("key sk_live_51HqLyjWDarjtT1zdp7dcXzYq leaked", f"key {R} leaked"),
    ("used wsk_0123456789ab_" + "x1" * 21 + "y", f"used {R}"),
]

KEPT = [
    "the token expired; Basic authentication is not offered",
    "POST https://api.test/v1/orders returned 502 after 3 tries",
    "{'order_id': 'o-7', 'status': 'declined', 'sku': 'A1'}",
    "request 3f2b8a1c-1d2e-4f5a-9b8c-7d6e5f4a3b2c timed out",
    "[('Accept', 'application/json'), ('Host', 'api.test')]",
]


@pytest.mark.parametrize(("text", "remains"), SHAPES)
def test_each_shape_loses_its_credentials_and_only_them(text: str, remains: str) -> None:
    assert redact_text(text) == remains
    assert redact_text(remains) == remains


@pytest.mark.parametrize("text", KEPT)
def test_text_without_credentials_is_kept_whole(text: str) -> None:
    assert redact_text(text) == text


TEMPLATES = [
    "{{'password': '{s}'}}",
    '{{"api_key": "{s}", "n": 1}}',
    "[(b'authorization', b'Basic {s}')]",
    "[('X-Api-Key', '{s}')]",
    "Client(token='{s}', retries=3)",
    "user=bob&password={s}&remember=1",
    "Authorization: Bearer {s}\r\nAccept: */*",
    "https://bob:{s}@api.test/v1",
    "https://api.test/v1?key={s}",
    '{{"body": "{{\\"secret\\": \\"{s}\\"}}"}}',
]


@given(
    template=st.sampled_from(TEMPLATES),
    secret=st.text(
        alphabet=st.characters(categories=["Lu", "Ll", "Nd"], max_codepoint=127),
        min_size=6,
        max_size=40,
    ).filter(lambda s: sum(c.isdigit() for c in s) >= 2),  # no word of the template's own
)
def test_any_secret_in_any_shape_vanishes(template: str, secret: str) -> None:
    redacted = redact_text(template.format(s=secret))
    assert secret not in redacted
    assert redact_text(redacted) == redacted
