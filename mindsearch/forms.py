from __future__ import annotations

import math
from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm, UsernameField
from django.contrib.auth.models import User
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from mindsearch import throttle
from mindsearch.models import SCOPE_HELP, TokenScope, all_scopes


class SignUpForm(UserCreationForm):
    email = forms.EmailField(label=_("Email"), required=False, help_text=_("Optional."))

    class Meta:  # UserCreationForm.Meta's, with the address
        model = User
        fields = ("username", "email")
        field_classes = {"username": UsernameField}


class GuardedAuthenticationMixin(AuthenticationForm):
    """The login guard (mindsearch/throttle.py) for any authentication form: within the delay
    the password is not even checked, and every failure counts for the account and address."""

    throttled = False
    retry_after = 0
    error_messages = {
        **AuthenticationForm.error_messages,
        "throttled": _("Too many failed sign-in attempts. Wait %(seconds)d seconds and try again."),
    }

    def clean(self) -> dict[str, Any]:
        request = self.request
        if request is None:
            return super().clean()
        username = self.cleaned_data.get("username") or ""
        attempt = throttle.Attempt(request, username)
        if not attempt.allowed:
            self.throttled = True
            self.retry_after = math.ceil(attempt.wait)
            raise forms.ValidationError(
                self.error_messages["throttled"], code="throttled", params={"seconds": self.retry_after}
            )
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            attempt.failed()
            raise
        attempt.succeeded()
        return cleaned


class ThrottledAuthenticationForm(GuardedAuthenticationMixin, AuthenticationForm):
    """The sign-in page's form."""


class ThrottledAdminAuthenticationForm(GuardedAuthenticationMixin, AdminAuthenticationForm):
    """The admin's sign-in form: the same guard, and the admin's own staff check after it."""

    error_messages = {**AdminAuthenticationForm.error_messages, **GuardedAuthenticationMixin.error_messages}
    error_messages["invalid_login"] = AdminAuthenticationForm.error_messages["invalid_login"]


SCOPE_CHOICES = [(scope.value, format_lazy("{}: {}", scope.label, SCOPE_HELP[scope])) for scope in TokenScope]


class ApiTokenForm(forms.Form):
    EXPIRY_CHOICES = [("", _("Never")), ("30", _("30 days")), ("90", _("90 days")), ("365", _("1 year"))]
    name = forms.CharField(
        label=_("Name"),
        max_length=100,
        help_text=_("What the token is for, e.g. “nightly report script”."),
        widget=forms.TextInput(attrs={"maxlength": 100}),
        error_messages={"required": _("Give the token a name.")},
    )
    expires_in_days = forms.TypedChoiceField(
        label=_("Expires"), choices=EXPIRY_CHOICES, coerce=int, empty_value=None, required=False
    )
    scopes = forms.MultipleChoiceField(
        label=_("Scopes"),
        choices=SCOPE_CHOICES,
        initial=all_scopes,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("What scripts holding the token may do; the fewer, the less a leaked token can do."),
        error_messages={"required": _("Choose at least one scope: a token without one can do nothing.")},
    )

    def clean_name(self) -> str:
        name = " ".join(self.cleaned_data["name"].split())
        if not name:
            raise forms.ValidationError(_("Give the token a name."))
        return name


class EmailAddressForm(forms.Form):
    email = forms.EmailField(
        label=_("E-mail address"),
        max_length=254,
        help_text=_("Scheduled research is delivered here once you have opened the link mailed to it."),
    )
