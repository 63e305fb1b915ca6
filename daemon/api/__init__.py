"""daemon.api: the app's HTTP API (role ``api``).

``server.ApiServer`` is the supervisor's child serving ``app.build_app`` with hypercorn on trio over the
connections of ``transport`` (head, idle and send timeouts; the parser's refusals in the error shape);
``gate`` admits requests (token, per-user and per-address limits) before any body is read; ``middleware``
the access log, HTTP rules and body limit; ``auth`` verifies Cognito user-pool access tokens against the
pool's JWKS; ``ratelimit`` the token buckets; ``models`` the request and response bodies; ``openapi`` the
contract's additions; ``cache`` the short in-memory caches; ``settings`` the ``[api]`` and ``[auth]``
sections. See docs/api.md. Nothing in the engine imports this package.
"""
