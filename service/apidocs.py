"""The API docs pages, `/docs` (Swagger UI) and `/redoc`, with their scripts served here.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, so on a network that cannot reach one
(an air-gapped cluster, a locked-down office) `/docs` was a blank page. The `fastapi-offline`
package ships both as plain files (Swagger UI 5, which renders the OpenAPI 3.1 the service
publishes; the PyPI bundle of Swagger UI is version 4, which cannot); only those files are used.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS = "/docs/assets"  # below /docs, so one path prefix covers the pages and their files


def add_docs(app: FastAPI) -> None:
    """Serve `/docs`, `/redoc` and their files from this process (the app is made with
    `docs_url=None, redoc_url=None`)."""
    folder = files("fastapi_offline") / "static"
    app.mount(ASSETS, StaticFiles(directory=str(folder)), name="docs-assets")
    title = f"{app.title} - API docs"

    def urls(request: Request) -> tuple[str, str]:
        """The spec's and the files' URLs below the prefix Ray mounts the app at."""
        root = request.scope.get("root_path", "").rstrip("/")
        return f"{root}{app.openapi_url}", f"{root}{ASSETS}"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        spec, assets = urls(request)
        return get_swagger_ui_html(
            openapi_url=spec,
            title=title,
            swagger_js_url=f"{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{assets}/swagger-ui.css",
            swagger_favicon_url=f"{assets}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        spec, assets = urls(request)
        return get_redoc_html(
            openapi_url=spec,
            title=title,
            redoc_js_url=f"{assets}/redoc.standalone.js",
            redoc_favicon_url=f"{assets}/favicon.png",
            with_google_fonts=False,  # fetched from Google's servers: not offline
        )
