"""An account's e-mail address for deliveries, and its verification.

Nothing is delivered to an address before its owner opened the link mailed to it: the link
carries a signed, dated token naming the account and the address (Django's signing), so it needs
no stored secret, works without signing in, and stops working when the address is changed or
after VERIFY_DAYS.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import User
from django.core import signing
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation

from mindsearch.models import EmailAddress
from mindsearch.querysets import AnyUser

VERIFY_SALT = "mindsearch.email-verify"
VERIFY_DAYS = 3
# One verification mail per address this often at most: the form cannot be turned into a mailer.
RESEND_SECONDS = 60


class EmailError(Exception):
    """The address cannot be set or verified now; the message says why, for the user."""


def mail_configured() -> bool:
    """Whether this instance can send mail (EMAIL_HOST set, or another backend chosen)."""
    smtp = settings.EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend"
    return bool(settings.EMAIL_HOST) or not smtp


def absolute(path: str) -> str:
    """A link for an e-mail or a webhook body: MINDSEARCH_PUBLIC_URL, else the first host."""
    base = settings.MINDSEARCH_PUBLIC_URL
    if not base:
        host = next((h for h in settings.ALLOWED_HOSTS if h not in ("*", "")), "localhost").lstrip(".")
        base = f"http://{host}"
    return f"{base}{path}"


def address_of(user: User) -> EmailAddress | None:
    return EmailAddress.objects.filter(user=user).first()


def verified_address(user: AnyUser) -> str:
    """The address to deliver to, or "" while there is none verified (or no one signed in)."""
    if not isinstance(user, User):
        return ""
    address = address_of(user)
    return address.email if address is not None and address.verified else ""


def set_address(user: User, email: str, language: str) -> EmailAddress:
    """Keep `email` as the account's (unverified until its link is opened) and mail the link."""
    if not mail_configured():
        raise EmailError(
            translation.gettext("This instance cannot send e-mail: the operator has not set EMAIL_HOST.")
        )
    address, _created = EmailAddress.objects.get_or_create(user=user, defaults={"email": email})
    if address.email != email:
        address.email, address.verified_at, address.sent_at = email, None, None
    if address.verified:
        return address
    now = timezone.now()
    if address.sent_at is not None and (now - address.sent_at).total_seconds() < RESEND_SECONDS:
        raise EmailError(
            translation.gettext("A link was sent a moment ago; wait a minute before asking again.")
        )
    address.sent_at = now
    address.save()
    if user.email != email:
        user.email = email
        user.save(update_fields=["email"])
    _send_link(address, language)
    return address


def _send_link(address: EmailAddress, language: str) -> None:
    token = signing.dumps({"u": address.user_id, "e": address.email}, salt=VERIFY_SALT)
    link = absolute(reverse("email_verify", args=[token]))
    with translation.override(language):
        context = {"link": link, "user": address.user, "days": VERIFY_DAYS}
        message = EmailMultiAlternatives(
            subject=translation.gettext("Confirm your e-mail address for MindSearch"),
            body=render_to_string("email/verify.txt", context),
            to=[address.email],
        )
        message.attach_alternative(render_to_string("email/verify.html", context), "text/html")
    message.send()


def verify(token: str) -> EmailAddress:
    """Mark the address the token names verified; EmailError when it is stale or unknown."""
    try:
        data = signing.loads(token, salt=VERIFY_SALT, max_age=VERIFY_DAYS * 86400)
    except signing.SignatureExpired:
        raise EmailError(translation.gettext("This link has expired; ask for a new one.")) from None
    except signing.BadSignature:
        raise EmailError(translation.gettext("This link is not valid.")) from None
    address = EmailAddress.objects.filter(user_id=data.get("u"), email=data.get("e")).first()
    if address is None:
        raise EmailError(translation.gettext("This link is for an address the account no longer uses."))
    if not address.verified:
        address.verified_at = timezone.now()
        address.save(update_fields=["verified_at"])
    return address
