"""The protected API (both of DOT's behaviours) and the tests' own controls under /test/."""

import hashlib
import json
from datetime import timedelta

from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from oauth2_provider.models import get_access_token_model, get_refresh_token_model
from oauth2_provider.views.generic import ProtectedResourceMetadataView, ProtectedResourceView

from . import recorder


def _profile(request):
    user = request.resource_owner
    return JsonResponse({"username": user.get_username() if user else None})


class Profile(ProtectedResourceMetadataView):
    """RFC 6750: a missing, expired or revoked token gets 401 with a Bearer challenge (DOT's
    opt-in RFC 9728 view, which also names the protected-resource metadata)."""

    def get(self, request, *args, **kwargs):
        return _profile(request)


class ProfileDOTDefault(ProtectedResourceView):
    """DOT's default ProtectedResourceView: a bad token gets a bare 403, no challenge."""

    def get(self, request, *args, **kwargs):
        return _profile(request)


@require_GET
def requests(request):
    return JsonResponse({"requests": recorder.snapshot()})


@require_GET
def tokens(request):
    AccessToken = get_access_token_model()
    RefreshToken = get_refresh_token_model()
    return JsonResponse(
        {
            "access_tokens": AccessToken.objects.count(),
            "refresh_tokens": RefreshToken.objects.count(),
            "refresh_tokens_revoked": RefreshToken.objects.filter(revoked__isnull=False).count(),
        }
    )


@require_POST
def expire_access_token(request):
    """Makes an access token expired now, as if its lifetime had passed: the client still
    believes it valid."""
    checksum = hashlib.sha256(request.POST.get("token", "").encode("utf-8")).hexdigest()
    updated = get_access_token_model().objects.filter(token_checksum=checksum).update(
        expires=timezone.now() - timedelta(seconds=1)
    )
    return JsonResponse({"expired": updated == 1}, status=200 if updated == 1 else 404)


@require_POST
def refresh_token_state(request):
    """Whether the server knows a refresh token, and whether it is revoked (rotated away or
    revoked at the revocation endpoint)."""
    token = request.POST.get("token", "")
    found = get_refresh_token_model().objects.filter(token=token).first()
    return JsonResponse({"exists": found is not None, "revoked": bool(found and found.revoked is not None)})


def login_required(request):
    """Where DOT sends a browser that is not signed in (LOGIN_URL): a plain 401 without a
    challenge, so a test that forgot the sign-in fails at once."""
    return HttpResponse("sign-in required: send the test user as HTTP Basic", status=401, content_type="text/plain")
