from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path
from django.views.i18n import set_language

from mindsearch import api, health, metrics, views

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", login_not_required(metrics.metrics_view), name="metrics"),
    path("status/", views.status, name="status"),
    path("status/model-check/", views.status_model_check, name="status_model_check"),
    path("accounts/signup/", views.signup, name="signup"),
    path("accounts/login/", views.login_view, name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path(
        "accounts/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("settings/tokens/", views.api_tokens, name="api_tokens"),
    path("settings/email/", views.email_settings, name="email_settings"),
    path("email/verify/<str:token>/", views.email_verify, name="email_verify"),
    path("settings/tokens/<int:token_id>/revoke/", views.api_token_revoke, name="api_token_revoke"),
    path("i18n/setlang/", login_not_required(set_language), name="set_language"),
    path("admin/", admin.site.urls),
    path("api/", api.urls()),
    path("documents/", include("retrieval.urls")),
    path("", include("research.urls")),
]
