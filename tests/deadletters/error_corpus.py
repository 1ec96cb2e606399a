"""Error texts as handlers meet them (Django, psycopg, redis-py, requests, httpx, boto,
a Stripe-style API), written for these tests: each group holds variants of one error —
differing by addresses, ports, host names, ids, durations, quoted values — and the key
(the cause's pattern) all of them must have; no two groups may share a key.

Add a group when a real message splits into several causes or two different errors
merge into one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorGroup:
    """Variants of one error, and the pattern (``error_key``) they share."""

    name: str
    error_class: str
    key: str
    variants: tuple[str, ...]


def _group(name: str, error_class: str, key: str, *variants: str) -> ErrorGroup:
    return ErrorGroup(name, error_class, key, variants)


_PG_REFUSED = (
    'connection failed: connection to server at "{}", port {} failed: Connection refused\n'
    "\tIs the server running on that host and accepting TCP/IP connections?"
)
_REQUESTS_REFUSED = (
    "HTTPSConnectionPool(host='{host}', port={port}): Max retries exceeded with url: {path} "
    "(Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at {at}>: "
    "Failed to establish a new connection: [Errno 111] Connection refused'))"
)
_REQUESTS_UNRESOLVED = (
    "HTTPSConnectionPool(host='{host}', port=443): Max retries exceeded with url: {path} "
    '(Caused by NameResolutionError("<urllib3.connection.HTTPSConnection object at {at}>: '
    "Failed to resolve '{host}' ([Errno -2] Name or service not known)\"))"
)
_REQUESTS_CONNECT_TIMEOUT = (
    "HTTPSConnectionPool(host='{host}', port=443): Max retries exceeded with url: {path} "
    "(Caused by ConnectTimeoutError(<urllib3.connection.HTTPSConnection object at {at}>, "
    "'Connection to {host} timed out. (connect timeout={s})'))"
)
_HTTPX_STATUS = (
    "{kind} error '{status}' for url '{url}'\n"
    "For more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/{code}"
)
_DEADLOCK = (
    "deadlock detected\n"
    "DETAIL:  Process {a} waits for ShareLock on transaction {t}; blocked by process {b}.\n"
    "Process {b} waits for ShareLock on transaction {u}; blocked by process {a}.\n"
    "HINT:  See server log for query details.\n"
    'CONTEXT:  while updating tuple (0,{row}) in relation "shop_stock"'
)

_FUNDS = "Your card has insufficient funds."
_STRIPE_BODY = (
    '{{"error": {{"code": "card_declined", "decline_code": "{decline}", "message": "{message}", '
    '"request_log_url": "https://dashboard.stripe.com/logs/{req}?t={t}", "type": "card_error"}}}}'
)

CORPUS: tuple[ErrorGroup, ...] = (
    # -- Django ---------------------------------------------------------------------------
    _group(
        "order does not exist",
        "DoesNotExist",
        "Order matching query does not exist.",
        "Order matching query does not exist.",
        "Order matching query does not exist.",
    ),
    _group(
        "customer does not exist",
        "DoesNotExist",
        "Customer matching query does not exist.",
        "Customer matching query does not exist.",
    ),
    _group(
        "more than one order",
        "MultipleObjectsReturned",
        "get() returned more than one Order -- it returned <n>!",
        "get() returned more than one Order -- it returned 2!",
        "get() returned more than one Order -- it returned 17!",
    ),
    _group(
        "not a valid UUID",
        "ValidationError",
        "['<str> is not a valid UUID.']",
        "['“abc” is not a valid UUID.']",
        "['“7f9c-12” is not a valid UUID.']",
        "['“order 12” is not a valid UUID.']",
    ),
    _group(
        "e-mail field invalid",
        "ValidationError",
        "{'email': ['Enter a valid email address.']}",
        "{'email': ['Enter a valid email address.']}",
    ),
    _group(
        "name field blank",
        "ValidationError",
        "{'name': ['This field cannot be blank.']}",
        "{'name': ['This field cannot be blank.']}",
    ),
    _group(
        "sku too long",
        "ValidationError",
        "{'sku': ['Ensure this value has at most <n> characters (it has <n>).']}",
        "{'sku': ['Ensure this value has at most 32 characters (it has 41).']}",
        "{'sku': ['Ensure this value has at most 32 characters (it has 57).']}",
    ),
    _group(
        "sqlite unique order number",
        "IntegrityError",
        "UNIQUE constraint failed: shop_order.number",
        "UNIQUE constraint failed: shop_order.number",
    ),
    _group(
        "sqlite not null customer",
        "IntegrityError",
        "NOT NULL constraint failed: shop_order.customer_id",
        "NOT NULL constraint failed: shop_order.customer_id",
    ),
    # -- psycopg (through Django or not) -------------------------------------------------
    _group(
        "duplicate order number",
        "IntegrityError",
        "duplicate key value violates unique constraint <str> DETAIL: Key (number)=(<value>) "
        "already exists.",
        'duplicate key value violates unique constraint "shop_order_number_key"\n'
        "DETAIL:  Key (number)=(A-1001) already exists.",
        'duplicate key value violates unique constraint "shop_order_number_key"\n'
        "DETAIL:  Key (number)=(spring-sale) already exists.",
        'duplicate key value violates unique constraint "shop_order_number_key"\n'
        "DETAIL:  Key (number)=(2024 0001) already exists.",
    ),
    _group(
        "order line without its order",
        "IntegrityError",
        "insert or update on table <str> violates foreign key constraint <str> DETAIL: Key "
        "(order_id)=(<value>) is not present in table <str>.",
        'insert or update on table "shop_orderline" violates foreign key constraint '
        '"shop_orderline_order_id_5c3a_fk_shop_order_id"\n'
        'DETAIL:  Key (order_id)=(123) is not present in table "shop_order".',
        'insert or update on table "shop_orderline" violates foreign key constraint '
        '"shop_orderline_order_id_5c3a_fk_shop_order_id"\n'
        'DETAIL:  Key (order_id)=(98812) is not present in table "shop_order".',
    ),
    _group(
        "order without a customer",
        "IntegrityError",
        "null value in column <str> of relation <str> violates not-null constraint DETAIL: "
        "Failing row contains (<value>).",
        'null value in column "customer_id" of relation "shop_order" violates not-null '
        "constraint\nDETAIL:  Failing row contains (17, null, 2024-05-01 12:00:00+00, pending).",
        'null value in column "customer_id" of relation "shop_order" violates not-null '
        "constraint\nDETAIL:  Failing row contains (18, null, 2024-05-02 08:30:00+00, paid, "
        "Jane Doe).",
    ),
    _group(
        "missing table",
        "ProgrammingError",
        "relation <str> does not exist",
        'relation "shop_refund" does not exist',
        'relation "shop_giftcard" does not exist',
    ),
    _group(
        "deadlock",
        "OperationalError",
        "deadlock detected DETAIL: Process <n> waits for ShareLock on transaction <n>; blocked "
        "by process … HINT: See server log for query details. CONTEXT: while updating tuple "
        "(<n>,<n>) in relation <str>",
        _DEADLOCK.format(a=12345, b=12346, t=67890, u=67889, row=5),
        _DEADLOCK.format(a=801, b=77, t=1200333, u=1200334, row=41),
    ),
    _group(
        "could not serialize",
        "OperationalError",
        "could not serialize access due to concurrent update",
        "could not serialize access due to concurrent update",
    ),
    _group(
        "postgres refused",
        "OperationalError",
        "connection failed: connection to server at <str>, port <port> failed: Connection "
        "refused Is the server running on that host and accepting TCP/IP connections?",
        _PG_REFUSED.format("10.0.3.7", 5432),
        _PG_REFUSED.format("10.0.3.8", 6432),
        _PG_REFUSED.format("::1", 5432),
    ),
    _group(
        "postgres timeout",
        "OperationalError",
        "connection to server at <str> (<ip>), port <port> failed: timeout expired",
        'connection to server at "db-3.internal" (10.0.3.7), port 5432 failed: timeout expired',
        'connection to server at "db-4.internal" (fd00::4), port 5433 failed: timeout expired',
    ),
    _group(
        "postgres password",
        "OperationalError",
        "connection to server at <str>, port <port> failed: FATAL: password authentication "
        "failed for user <str>",
        'connection to server at "10.0.3.7", port 5432 failed: FATAL:  password '
        'authentication failed for user "shop"',
        'connection to server at "10.0.3.9", port 5432 failed: FATAL:  password '
        'authentication failed for user "shop_ro"',
    ),
    _group(
        "postgres host unknown",
        "OperationalError",
        "could not translate host name <str> to address: Name or service not known",
        'could not translate host name "db-3.internal" to address: Name or service not known',
        'could not translate host name "pg-primary" to address: Name or service not known',
    ),
    _group(
        "serialization failure by SQLSTATE",
        "RuntimeError",
        "batch <n> aborted: SQLSTATE 40001",
        "batch 17 aborted: SQLSTATE 40001",
        "batch 2041 aborted: SQLSTATE 40001",
    ),
    _group(
        "deadlock by SQLSTATE",
        "RuntimeError",
        "batch <n> aborted: SQLSTATE 40P01",
        "batch 18 aborted: SQLSTATE 40P01",
        "batch 9 aborted: SQLSTATE 40P01",
    ),
    # -- redis-py -------------------------------------------------------------------------
    _group(
        "redis refused",
        "ConnectionError",
        "Error 111 connecting to <ip>:<port>. Connection refused.",
        "Error 111 connecting to 10.0.0.5:6379. Connection refused.",
        "Error 111 connecting to 10.0.0.6:6380. Connection refused.",
        "Error 111 connecting to 172.31.4.20:6379. Connection refused.",
        "Error 111 connecting to 127.0.0.1:6379. Connection refused.",
    ),
    _group(
        "redis connect timed out",
        "TimeoutError",
        "Error 110 connecting to <host>:<port>. Connection timed out.",
        "Error 110 connecting to redis-7f9c.cache.amazonaws.com:6379. Connection timed out.",
        "Error 110 connecting to redis-01a2.cache.amazonaws.com:6379. Connection timed out.",
        "Error 110 connecting to db-3.internal:6380. Connection timed out.",
        "Error 110 connecting to ip-10-0-0-12.ec2.internal:6379. Connection timed out.",
    ),
    _group(
        "redis name unknown",
        "ConnectionError",
        "Error -2 connecting to redis-primary.internal:<port>. Name or service not known.",
        "Error -2 connecting to redis-primary.internal:6379. Name or service not known.",
        "Error -2 connecting to redis-primary.internal:16379. Name or service not known.",
    ),
    _group(
        "redis name resolution",
        "ConnectionError",
        "Error -3 connecting to redis:<port>. Temporary failure in name resolution.",
        "Error -3 connecting to redis:6379. Temporary failure in name resolution.",
        "Error -3 connecting to redis:6380. Temporary failure in name resolution.",
    ),
    _group(
        "redis read timeout",
        "TimeoutError",
        "Timeout reading from <ip>:<port>",
        "Timeout reading from 10.0.0.5:6379",
        "Timeout reading from 10.0.12.200:7000",
    ),
    _group(
        "redis moved",
        "ResponseError",
        "MOVED <n> <ip>:<port>",
        "MOVED 3999 127.0.0.1:6381",
        "MOVED 12182 10.0.0.7:6379",
    ),
    _group(
        "redis reset",
        "ConnectionError",
        "Error while reading from <ip>:<port> : (104, 'Connection reset by peer')",
        "Error while reading from 10.0.0.5:6379 : (104, 'Connection reset by peer')",
        "Error while reading from 10.0.0.9:6379 : (104, 'Connection reset by peer')",
    ),
    _group(
        "redis read timed out",
        "ConnectionError",
        "Error while reading from <ip>:<port> : (110, 'Connection timed out')",
        "Error while reading from 10.0.0.5:6379 : (110, 'Connection timed out')",
        "Error while reading from 10.0.0.8:6390 : (110, 'Connection timed out')",
    ),
    _group(
        "redis out of memory",
        "ResponseError",
        "OOM command not allowed when used memory > <str>.",
        "OOM command not allowed when used memory > 'maxmemory'.",
    ),
    # -- addresses in every form ----------------------------------------------------------
    _group(
        "stock service unreachable",
        "ConnectionError",
        "could not reach the stock service at <ip>:<port>: connection refused",
        "could not reach the stock service at 10.0.0.5:8080: connection refused",
        "could not reach the stock service at [::1]:8080: connection refused",
        "could not reach the stock service at [fe80::1%eth0]:8080: connection refused",
        "could not reach the stock service at [::ffff:10.0.0.5]:9000: connection refused",
        "could not reach the stock service at [2001:db8:85a3::8a2e:370:7334]:8443: "
        "connection refused",
    ),
    _group(
        "stock service reset",
        "ConnectionError",
        "could not reach the stock service at <ip>:<port>: connection reset by peer",
        "could not reach the stock service at 10.0.0.5:8080: connection reset by peer",
        "could not reach the stock service at [2001:db8::17]:8080: connection reset by peer",
    ),
    _group(
        "stock service timed out",
        "ConnectionError",
        "could not reach the stock service at <ip>:<port>: timed out",
        "could not reach the stock service at 192.168.1.20:8080: timed out",
        "could not reach the stock service at [fd12:3456:789a:1::1]:8080: timed out",
    ),
    _group(
        "listener bound",
        "OSError",
        "[Errno 98] Address already in use: <ip>",
        "[Errno 98] Address already in use: 0.0.0.0",
        "[Errno 98] Address already in use: ::",
        "[Errno 98] Address already in use: fe80::1%eth0",
        "[Errno 98] Address already in use: 2001:db8::1",
    ),
    _group(
        "aiohttp refused",
        "ClientConnectorError",
        "Cannot connect to host <host>:<port> ssl:default [Connection refused]",
        "Cannot connect to host eu-1.api.partner.com:443 ssl:default [Connection refused]",
        "Cannot connect to host us-2.api.partner.com:8443 ssl:default [Connection refused]",
    ),
    # -- sockets, whatever the library ---------------------------------------------------
    _group(
        "refused",
        "ConnectionRefusedError",
        "[Errno 111] Connection refused",
        "[Errno 111] Connection refused",
    ),
    _group(
        "no route",
        "OSError",
        "[Errno 113] No route to host",
        "[Errno 113] No route to host",
    ),
    _group(
        "reset",
        "ConnectionResetError",
        "[Errno 104] Connection reset by peer",
        "[Errno 104] Connection reset by peer",
    ),
    _group(
        "name not known",
        "ConnectError",
        "[Errno -2] Name or service not known",
        "[Errno -2] Name or service not known",
    ),
    _group("timed out", "ReadTimeout", "timed out", "timed out"),
    # -- requests and httpx ---------------------------------------------------------------
    _group(
        "partner refused",
        "ConnectionError",
        "HTTPSConnectionPool(host=<str>, port=<port>): Max retries exceeded with url: … "
        "(Caused by NewConnectionError('<object>: Failed to establish a new connection: "
        "[Errno 111] Connection refused'))",
        _REQUESTS_REFUSED.format(
            host="api.partner.com", port=443, path="/v1/orders/123?x=1", at="0x7f3b2c1d0e50"
        ),
        _REQUESTS_REFUSED.format(
            host="api.partner.com", port=8443, path="/v1/orders/98?x=abc", at="0x7f0c8a7e5d30"
        ),
        _REQUESTS_REFUSED.format(
            host="10.0.0.5", port=443, path="/v1/orders/7?x=2", at="0x10b2f4c90"
        ),
    ),
    _group(
        "partner unresolved",
        "ConnectionError",
        "HTTPSConnectionPool(host=<str>, port=<port>): Max retries exceeded with url: "
        '/<id>/orders/<n> … by NameResolutionError("<object>: Failed to resolve <str> '
        '([Errno -2] Name or service not known)"))',
        _REQUESTS_UNRESOLVED.format(
            host="api.partner.com", path="/v1/orders/123", at="0x7f3b2c1d0e50"
        ),
        _REQUESTS_UNRESOLVED.format(
            host="api-2.partner.com", path="/v1/orders/5", at="0x7f0c8a7e5d30"
        ),
    ),
    _group(
        "partner connect timeout",
        "ConnectTimeout",
        "HTTPSConnectionPool(host=<str>, port=<port>): Max retries exceeded with url: "
        "/<id>/orders/<n> … ConnectTimeoutError(<object>, 'Connection to api.partner.com "
        "timed out. (connect timeout=<duration>)'))",
        _REQUESTS_CONNECT_TIMEOUT.format(
            host="api.partner.com", path="/v1/orders/123", at="0x7f3b2c1d0e50", s=5
        ),
        _REQUESTS_CONNECT_TIMEOUT.format(
            host="api.partner.com", path="/v1/orders/44", at="0x7f0c8a7e5d30", s=3.05
        ),
    ),
    _group(
        "partner read timeout",
        "ReadTimeout",
        "HTTPSConnectionPool(host=<str>, port=<port>): Read timed out. (read timeout=<duration>)",
        "HTTPSConnectionPool(host='api.partner.com', port=443): Read timed out. (read timeout=10)",
        "HTTPSConnectionPool(host='api.partner.com', port=443): Read timed out. (read timeout=2.5)",
    ),
    _group(
        "partner 503",
        "HTTPError",
        "503 Server Error: Service Unavailable for url: https://api.partner.com/<id>/orders/<n>",
        "503 Server Error: Service Unavailable for url: https://api.partner.com/v1/orders/123",
        "503 Server Error: Service Unavailable for url: https://api.partner.com/v1/orders/9",
    ),
    _group(
        "partner 500",
        "HTTPError",
        "500 Server Error: Internal Server Error for url: https://api.partner.com/<id>/orders/<n>",
        "500 Server Error: Internal Server Error for url: https://api.partner.com/v1/orders/1",
    ),
    _group(
        "partner 404",
        "HTTPError",
        "404 Client Error: Not Found for url: https://api.partner.com/<id>/orders/<n>",
        "404 Client Error: Not Found for url: https://api.partner.com/v1/orders/123",
        "404 Client Error: Not Found for url: https://api.partner.com/v1/orders/55",
    ),
    _group(
        "partner 429",
        "HTTPError",
        "429 Client Error: Too Many Requests for url: https://api.partner.com/<id>/orders"
        "?page=<value>",
        "429 Client Error: Too Many Requests for url: https://api.partner.com/v1/orders?page=2",
        "429 Client Error: Too Many Requests for url: https://api.partner.com/v1/orders?page=31",
    ),
    _group(
        "httpx 503",
        "HTTPStatusError",
        "Server error '503 Service Unavailable' for url <str> For more information check: "
        "https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/<n>",
        _HTTPX_STATUS.format(
            kind="Server",
            status="503 Service Unavailable",
            url="https://api.partner.com/v1/orders/123",
            code=503,
        ),
        _HTTPX_STATUS.format(
            kind="Server",
            status="503 Service Unavailable",
            url="https://eu-1.api.partner.com/v1/orders/9",
            code=503,
        ),
    ),
    _group(
        "httpx 404",
        "HTTPStatusError",
        "Client error '404 Not Found' for url <str> For more information check: "
        "https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/<n>",
        _HTTPX_STATUS.format(
            kind="Client",
            status="404 Not Found",
            url="https://api.partner.com/v1/customers/cus_Q1w2e3",
            code=404,
        ),
    ),
    # Only the status tells these three apart.
    _group(
        "partner answered 429",
        "PartnerError",
        "partner API answered HTTP 429 for order <n>",
        "partner API answered HTTP 429 for order 1234",
        "partner API answered HTTP 429 for order 98",
    ),
    _group(
        "partner answered 500",
        "PartnerError",
        "partner API answered HTTP 500 for order <n>",
        "partner API answered HTTP 500 for order 1234",
        "partner API answered HTTP 500 for order 7",
    ),
    _group(
        "partner answered 404",
        "PartnerError",
        "partner API answered status=404 for order <n>",
        "partner API answered status=404 for order 1234",
        "partner API answered status=404 for order 3",
    ),
    # -- boto -----------------------------------------------------------------------------
    _group(
        "s3 throttled",
        "ClientError",
        "An error occurred (ThrottlingException) when calling the PutObject operation "
        "(reached max retries: <n>): Rate exceeded",
        "An error occurred (ThrottlingException) when calling the PutObject operation "
        "(reached max retries: 4): Rate exceeded",
        "An error occurred (ThrottlingException) when calling the PutObject operation "
        "(reached max retries: 9): Rate exceeded",
    ),
    _group(
        "s3 no such key",
        "NoSuchKey",
        "An error occurred (NoSuchKey) when calling the GetObject operation: The specified "
        "key does not exist.",
        "An error occurred (NoSuchKey) when calling the GetObject operation: The specified "
        "key does not exist.",
    ),
    _group(
        "s3 unreachable",
        "EndpointConnectionError",
        "Could not connect to the endpoint URL: <str>",
        'Could not connect to the endpoint URL: "https://s3.eu-west-1.amazonaws.com/bucket/key"',
        'Could not connect to the endpoint URL: "https://invoices.s3.us-east-2.amazonaws.com/'
        '2024/05/inv-881.pdf"',
    ),
    _group(
        "sqs connect timeout",
        "ConnectTimeoutError",
        "Connect timeout on endpoint URL: <str>",
        'Connect timeout on endpoint URL: "https://sqs.eu-west-1.amazonaws.com/"',
        'Connect timeout on endpoint URL: "https://sqs.us-east-1.amazonaws.com/"',
    ),
    # -- a Stripe-style payments API ------------------------------------------------------
    _group(
        "card declined",
        "CardError",
        "Request <id>: Your card was declined.",
        "Request req_8Hk2aPq: Your card was declined.",
        "Request req_AbCdEfGhIjKl: Your card was declined.",
        "Request req_x7Y2mQ0pLs: Your card was declined.",
    ),
    _group(
        "insufficient funds",
        "CardError",
        "Request <id>: Your card has insufficient funds.",
        "Request req_8Hk2aPq: Your card has insufficient funds.",
        "Request req_ZyXwVuTsRq: Your card has insufficient funds.",
    ),
    _group(
        "no such customer",
        "InvalidRequestError",
        "No such customer: <str>",
        "No such customer: 'cus_Q1w2e3'",
        "No such customer: 'cus_NffrFeUfNV2Hib'",
    ),
    _group(
        "rate limited",
        "RateLimitError",
        "Rate limit exceeded",
        "Rate limit exceeded",
    ),
    _group(
        "declined, insufficient funds",
        "PaymentFailed",
        "charge <id> failed: card_declined (decline_code=insufficient_funds)",
        "charge ch_3MqLx2LkdIwHu7ix0X9p failed: card_declined (decline_code=insufficient_funds)",
        "charge ch_3NaBc9LkdIwHu7ix1Y2z failed: card_declined (decline_code=insufficient_funds)",
    ),
    _group(
        "declined, expired",
        "PaymentFailed",
        "charge <id> failed: card_declined (decline_code=expired_card)",
        "charge ch_3MqLx2LkdIwHu7ix0X9p failed: card_declined (decline_code=expired_card)",
    ),
    _group(
        "processing error",
        "PaymentFailed",
        "charge <id> failed: processing_error",
        "charge ch_3MqLx2LkdIwHu7ix0X9p failed: processing_error",
        "charge ch_3Qr8sTLkdIwHu7ix5W6v failed: processing_error",
    ),
    # An API's error body: the codes are the error, the ids and links are not.
    _group(
        "body: insufficient funds",
        "CardError",
        '{"error": {"code": "card_declined", "decline_code": "insufficient_funds", "message": '
        '"Your card has insufficient funds.", "request_log_url": <str>, "type": "card_error"}}',
        _STRIPE_BODY.format(
            decline="insufficient_funds", message=_FUNDS, req="req_8Hk2aPq", t=1717171717
        ),
        _STRIPE_BODY.format(
            decline="insufficient_funds", message=_FUNDS, req="req_AbCdEfGhIj", t=1717179999
        ),
    ),
    _group(
        "body: expired card",
        "CardError",
        '{"error": {"code": "card_declined", "decline_code": "expired_card", "message": '
        '"Your card has expired.", "request_log_url": <str>, "type": "card_error"}}',
        _STRIPE_BODY.format(
            decline="expired_card", message="Your card has expired.", req="req_8Hk2aPq", t=17
        ),
    ),
    _group(
        "body: invalid grant",
        "OAuthError",
        '{"error": "invalid_grant", "error_description": <str>}',
        '{"error": "invalid_grant", "error_description": "Token has expired"}',
        '{"error": "invalid_grant", "error_description": "Refresh token 8f3k revoked"}',
    ),
    _group(
        "body: invalid client",
        "OAuthError",
        '{"error": "invalid_client", "error_description": <str>}',
        '{"error": "invalid_client", "error_description": "Client authentication failed"}',
    ),
    # -- durations, ids, times ------------------------------------------------------------
    _group(
        "stock lock",
        "LockTimeout",
        "could not take the stock lock after <duration>",
        "could not take the stock lock after 30.5s",
        "could not take the stock lock after 5000ms",
        "could not take the stock lock after 1.2 seconds",
        "could not take the stock lock after 2m30s",
    ),
    _group(
        "customer without address",
        "ValueError",
        "customer <uuid> has no address",
        "customer 3f1c2a9e-8b7d-4c6e-9f0a-1b2c3d4e5f60 has no address",
        "customer 00000000-0000-0000-0000-00000000002a has no address",
    ),
    _group(
        "trace dropped",
        "ValueError",
        "span <id> of trace <id> dropped",
        "span 00f067aa0ba902b7 of trace 4bf92f3577b34da6a3ce929d0e0e4736 dropped",
        "span 53995c3f42cd8ad8 of trace 0af7651916cd43dd8448eb211c80319c dropped",
    ),
    _group(
        "shipment window closed",
        "ValueError",
        "shipment window <time> closed at <time>",
        "shipment window 2024-05-01T12:00:00Z closed at 11:58:03",
        "shipment window 2024-11-30 08:00:00+01:00 closed at 7:59:59.120",
    ),
)
