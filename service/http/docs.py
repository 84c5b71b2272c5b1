"""``GET /docs``: Swagger UI from local files (``static/vendor/swagger-ui``), no CDN and no
inline script, so the strict CSP of ``middleware.SecurityHeadersMiddleware`` holds here too.
FastAPI's own ``/docs`` and ``/redoc`` (CDN scripts without integrity hashes) are off."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Shunter API</title>
<link rel="stylesheet" href="/vendor/swagger-ui/swagger-ui.css">
<link rel="icon" href="/vendor/swagger-ui/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/vendor/swagger-ui/swagger-ui-bundle.js"></script>
<script src="/js/docs.js"></script>
</body>
</html>
"""


@router.get("/docs", response_class=HTMLResponse)
def docs() -> HTMLResponse:
    return HTMLResponse(_PAGE)
