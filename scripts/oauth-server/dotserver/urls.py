from django.urls import include, path
from oauth2_provider import urls as oauth2_urls

from . import views

urlpatterns = [
    # RFC 8414 and RFC 9728 metadata at the root, as those RFCs locate them.
    path("", include((oauth2_urls.metadata_urlpatterns, "oauth2_provider_metadata"))),
    # authorize/, token/, revoke_token/, introspect/ (and DOT's other views) under /o/.
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("api/profile", views.Profile.as_view()),
    path("api/profile-dot-default", views.ProfileDOTDefault.as_view()),
    path("test/requests", views.requests),
    path("test/tokens", views.tokens),
    path("test/expire-access-token", views.expire_access_token),
    path("test/refresh-token-state", views.refresh_token_state),
    path("test/login-required", views.login_required),
]
