from __future__ import annotations

from django import forms
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm
from django.utils.translation import gettext_lazy as _

from mindsearch import throttle


class SignUpForm(UserCreationForm):
    email = forms.EmailField(label=_("Email"), required=False, help_text=_("Optional."))

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")


class ThrottledAuthenticationForm(AuthenticationForm):
    """Refuses to even check a password once too many attempts have failed."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "throttled": _("Too many failed sign-in attempts. Wait a few minutes and try again."),
    }

    def clean(self) -> dict:
        username = self.cleaned_data.get("username") or ""
        if self.request is not None and throttle.is_locked_out(self.request, username):
            self.throttled = True
            raise forms.ValidationError(self.error_messages["throttled"], code="throttled")
        try:
            cleaned = super().clean()
        except forms.ValidationError:
            if self.request is not None:
                throttle.record_failure(self.request, username)
            raise
        if self.request is not None:
            throttle.clear_failures(self.request, username)
        return cleaned
