"""daemon.api: the app's HTTP API (role ``api``).

``server.ApiServer`` is the supervisor's child serving ``app.build_app`` with hypercorn on trio; ``auth``
verifies Cognito user-pool access tokens against the pool's JWKS; ``ratelimit`` is the per-user token
bucket; ``models`` the request and response bodies; ``cache`` the short in-memory caches; ``issuer`` the
local stand-in for Cognito that the demo and the tests use; ``settings`` the ``[api]`` and ``[auth]``
sections. Nothing in the engine imports this package.
"""
