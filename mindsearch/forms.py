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


class ApiTokenForm(forms.Form):
    EXPIRY_CHOICES = [("", _("Never")), ("30", _("30 days")), ("90", _("90 days")), ("365", _("1 year"))]
    name = forms.CharField(
        label=_("Name"),
        max_length=100,
        help_text=_("What the token is for, e.g. “nightly report script”."),
        widget=forms.TextInput(attrs={"maxlength": 100}),
    )
    expires_in_days = forms.TypedChoiceField(
        label=_("Expires"), choices=EXPIRY_CHOICES, coerce=int, empty_value=None, required=False
    )

    def clean_name(self) -> str:
        name = " ".join(self.cleaned_data["name"].split())
        if not name:
            raise forms.ValidationError(_("Give the token a name."))
        return name
