"""The images door: ``POST /v1/images/generations`` in OpenAI's format, and ``GET /v1/images/files/{name}``,
which serves a generated image to whoever holds its signed URL (docs/images.md).

The route parses and authenticates like the chat route, checks the request
(:func:`~hearth.images.requests.check_image_request`), and hands it to the
:class:`~hearth.images.service.ImageService`, whose model call goes through the gateway core (route
``images`` in the request log and metrics). Errors are OpenAI's error object, with the catalog's codes.
"""

from __future__ import annotations

import orjson
from fastapi import Request
from starlette.responses import Response

from hearth.api.call_context import call_context, call_headers
from hearth.api.deps import authenticated_body, runtime
from hearth.api.images_schemas import ImageGenerationRequest, ImagesResponse
from hearth.api.openai_schemas import ERROR_RESPONSES, request_body
from hearth.api.request_body import parse_json_object
from hearth.api.route_defaults import api_router
from hearth.errors import HearthError
from hearth.images.requests import check_image_request
from hearth.images.service import ImageService

router = api_router(prefix="/v1/images", tags=["openai"])
_IMAGE_CONTENT: dict[str, dict[str, str]] = {"image/png": {}, "image/jpeg": {}, "image/webp": {}}


def _images(request: Request) -> ImageService:
    images = runtime(request).images
    if images is None:  # every runtime builds one; a test app without it answers like an unknown route
        raise HearthError("not_found", "Image generation is not available in this process.")
    return images


@router.post("/generations", summary="Create images", openapi_extra=request_body(ImageGenerationRequest),
             responses={200: {"model": ImagesResponse}, **ERROR_RESPONSES})
async def generations(request: Request) -> Response:
    caller, raw, nonce = await authenticated_body(request)
    body = parse_json_object(raw)
    image_request = check_image_request(body)
    rt = runtime(request)
    ctx = call_context(request, caller, body, "images", nonce=nonce)
    answer = await _images(request).generate(rt.gateway, ctx, image_request, base_url=str(request.base_url))
    return Response(orjson.dumps(answer), media_type="application/json", headers=call_headers(ctx))


@router.get("/files/{name}", summary="A generated image, by its signed URL",
            responses={200: {"content": _IMAGE_CONTENT, "description": "The image's bytes"}, **ERROR_RESPONSES})
async def image_file(name: str, request: Request) -> Response:
    """No ``Authorization``: the URL's signature and expiry are the credential (docs/images.md)."""
    params = request.query_params
    data, media, expires = await _images(request).read(name, expires=params.get("expires"),
                                                      signature=params.get("signature"))
    left = max(0, expires - int(_images(request).now()))
    return Response(data, media_type=media, headers={"Cache-Control": f"private, max-age={left}",
                                                     "X-Content-Type-Options": "nosniff"})
