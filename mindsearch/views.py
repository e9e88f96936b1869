from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from mindsearch.forms import SignUpForm, ThrottledAuthenticationForm
from mindsearch.status import run_checks


def status(request: HttpRequest) -> HttpResponse:
    """What is configured and reachable; also where a new user lands before any topic exists."""
    return render(request, "status.html", {"checks": run_checks()})


@login_not_required
@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("home")
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, _("Welcome to MindSearch, %s.") % user.username)
        return redirect("home")
    return render(request, "registration/signup.html", {"form": form})


class ThrottledLoginView(LoginView):
    form_class = ThrottledAuthenticationForm
    redirect_authenticated_user = True

    def form_invalid(self, form: ThrottledAuthenticationForm) -> HttpResponse:
        response = super().form_invalid(form)
        if getattr(form, "throttled", False):
            response.status_code = 429
        return response


login_view = login_not_required(ThrottledLoginView.as_view())
