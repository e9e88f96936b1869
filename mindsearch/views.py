from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import AdminSite
from django.contrib.auth import login
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import User
from django.contrib.auth.views import LoginView
from django.db import connection, transaction
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from mindsearch import email_address, signup_rate, throttle
from mindsearch.forms import (
    ApiTokenForm,
    EmailAddressForm,
    GuardedAuthenticationMixin,
    SignUpForm,
    ThrottledAuthenticationForm,
)
from mindsearch.models import ApiToken, Invite
from mindsearch.requests import signed_in
from mindsearch.status import check_the_model, checks_for


def status(request: HttpRequest) -> HttpResponse:
    """What is configured and reachable; also where a new user lands before any topic exists."""
    return render(request, "status.html", {"checks": checks_for(request.user)})


def status_model_check(request: HttpRequest) -> HttpResponse:
    """*Check the model* (staff): one plan call, and the page with what the pipeline makes of it.
    Anyone else gets 404 whatever the method, as for every URL that is not theirs."""
    if not request.user.is_staff:
        raise Http404
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    result = check_the_model(translation.get_language(), request.user.pk)
    return render(request, "status.html", {"checks": checks_for(request.user), "model_check": result})


@login_not_required
@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    """Joining, as the operator allows it (SIGNUP): open to anyone, by invite link only, or
    closed; and at most SIGNUP_RATE_PER_HOUR new accounts an hour from one address."""
    if request.user.is_authenticated:
        return redirect("home")
    mode = settings.SIGNUP
    token = request.POST.get("invite") or request.GET.get("invite") or ""
    invite = Invite.objects.find(token) if mode == "invite" else None
    if mode == "closed" or (mode == "invite" and invite is None):
        reason = (
            _("Sign-up is closed on this server. Ask its operator for an account.")
            if mode == "closed"
            else _("Sign-up on this server is by invitation: open the invite link you were sent.")
            if not token
            else _("This invite link is unknown, expired or already used. Ask the operator for a new one.")
        )
        return render(request, "registration/signup.html", {"closed_reason": reason}, status=403)
    form = SignUpForm(request.POST or None)
    context = {"form": form, "invite": token if invite else ""}
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            if not signup_rate.take(request):
                form.add_error(
                    None, _("Too many accounts were created from your address; try again in an hour.")
                )
                return render(request, "registration/signup.html", context, status=429)
            if invite is not None:
                # The invite is used once: a second tab with the same link finds it taken.
                claimed = Invite.objects.usable().filter(pk=invite.pk).update(used_at=timezone.now())
                if not claimed:
                    form.add_error(None, _("This invite link was used meanwhile."))
                    return render(request, "registration/signup.html", context, status=403)
            user = form.save()
            if invite is not None:
                Invite.objects.filter(pk=invite.pk).update(used_by=user)
            first = made_administrator(user)
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, _("Welcome to MindSearch, %s.") % user.username)
        if first:
            messages.info(
                request,
                _(
                    "Yours is the first account on this server, so you are its administrator: this "
                    "page shows what is not set up yet and how to set it; the admin is at /admin/."
                ),
            )
            return redirect("status")
        return redirect("home")
    context["first_admin"] = first_user_admin_open()
    return render(request, "registration/signup.html", context)


FIRST_ADMIN_LOCK = 7_303  # pg_advisory_xact_lock key: "who is the first administrator"


def first_user_admin_open() -> bool:
    """Whether the next account made here becomes the administrator: sign-up is open, the
    operator has not turned it off (MINDSEARCH_FIRST_USER_ADMIN=0), and nobody is staff yet."""
    return (
        settings.SIGNUP == "open"
        and settings.FIRST_USER_ADMIN
        and not User.objects.filter(Q(is_staff=True) | Q(is_superuser=True)).exists()
    )


def made_administrator(user: User) -> bool:
    """Make `user` (just created, inside the sign-up's transaction) the instance's administrator
    when it is the first account on an instance without staff. Two sign-ups at once wait for each
    other on a transaction lock, so the second sees the first's staff flag and stays a user."""
    if settings.SIGNUP != "open" or not settings.FIRST_USER_ADMIN:
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [FIRST_ADMIN_LOCK])
    others = User.objects.exclude(pk=user.pk)
    if others.filter(Q(is_staff=True) | Q(is_superuser=True)).exists():
        return False
    User.objects.filter(pk=user.pk).update(is_staff=True, is_superuser=True)
    user.is_staff = user.is_superuser = True
    return True


def guarded_response(request: HttpRequest, response: HttpResponse, form: object) -> HttpResponse:
    """A refused attempt answers 429 with Retry-After; a successful one remembers the browser."""
    if isinstance(form, GuardedAuthenticationMixin) and form.throttled:
        response.status_code = 429
        response["Retry-After"] = str(form.retry_after)
    return throttle.remember_device(request, response)


class ThrottledLoginView(LoginView):
    form_class = ThrottledAuthenticationForm
    redirect_authenticated_user = True

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        return guarded_response(self.request, super().form_invalid(form), form)

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        return guarded_response(self.request, super().form_valid(form), form)


def admin_login(request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
    """The admin's sign-in behind the same guard (mindsearch/admin_site.py)."""
    response = AdminSite.login(admin.site, request, extra_context)
    form = getattr(response, "context_data", None) or {}
    form = form.get("form") if isinstance(form, dict) else None
    return guarded_response(request, response, form)


login_view = login_not_required(ThrottledLoginView.as_view())


@require_http_methods(["GET", "POST"])
def api_tokens(request: HttpRequest) -> HttpResponse:
    """Personal API tokens: create one (its value is shown in this response only), see and
    revoke the others."""
    form = ApiTokenForm(request.POST or None)
    new_token, status = None, 200
    if request.method == "POST":
        if form.is_valid():
            days = form.cleaned_data["expires_in_days"]
            expires_in = timedelta(days=days) if days else None
            _row, new_token = ApiToken.issue(
                signed_in(request), form.cleaned_data["name"], expires_in, scopes=form.cleaned_data["scopes"]
            )
            form = ApiTokenForm()
        else:
            status = 400
    tokens = ApiToken.objects.for_user(request.user)
    context = {
        "form": form,
        "tokens": tokens,
        "new_token": new_token,
        "docs_url": reverse("api:openapi-view"),
        "topics_url": request.build_absolute_uri(reverse("api:list_topics")),
    }
    return render(request, "settings/api_tokens.html", context, status=status)


@require_POST
def api_token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    get_object_or_404(ApiToken.objects.for_user(request.user), pk=token_id).revoke()
    messages.success(request, _("The token was revoked; scripts using it now get 401."))
    return redirect("api_tokens")


@require_http_methods(["GET", "POST"])
def email_settings(request: HttpRequest) -> HttpResponse:
    """The account's address for deliveries: set it (a link is mailed to it) and see whether it
    is verified."""
    address = email_address.address_of(signed_in(request))
    form = EmailAddressForm(request.POST or None, initial={"email": address.email if address else ""})
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                address = email_address.set_address(
                    signed_in(request), form.cleaned_data["email"], translation.get_language() or "en"
                )
            except email_address.EmailError as error:
                form.add_error("email", str(error))
            else:
                if not address.verified:
                    messages.info(
                        request,
                        _("A link was sent to %(email)s: open it to confirm the address.")
                        % {"email": address.email},
                    )
                return redirect("email_settings")
        status = 400
    context = {"form": form, "address": address, "configured": email_address.mail_configured()}
    return render(request, "settings/email.html", context, status=status)


@login_not_required
@require_http_methods(["GET"])
def email_verify(request: HttpRequest, token: str) -> HttpResponse:
    """The link mailed to an address: opening it confirms the address, signed in or not."""
    try:
        address = email_address.verify(token)
    except email_address.EmailError as error:
        return render(request, "settings/email_verified.html", {"error": str(error)}, status=400)
    return render(request, "settings/email_verified.html", {"address": address})
