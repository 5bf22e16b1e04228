"""`tensorfold serve`: an OpenAI-compatible HTTP server (aiohttp) over the `Engine`.

Modules: `app` (routes, middleware, streaming, shutdown), `protocol` (request validation, response shapes, text
helpers), `bridge` (the engine thread and per-request asyncio queues), `auth` (API keys), `metrics` (Prometheus
text), `reqlog` (the JSON-lines request log), `cli` (the `serve` command). Nothing here is imported by
`tensorfold --help`.
"""
