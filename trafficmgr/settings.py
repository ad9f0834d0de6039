"""Django settings, read from the environment (see the README's configuration table)."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from trafficmgr.runtime.env import (
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("TRAFFICMGR_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)


HELP_ARGS = frozenset({"help", "--help", "-h", "version", "--version"})
MANAGE_PROGRAMS = frozenset({"manage.py", "django-admin", "__main__.py"})


def _only_help(argv: list[str]) -> bool:
    """Tell whether this process is ``manage.py`` printing help or its version: it signs
    nothing, so it needs no secret key (a newcomer's first command must not fail)."""
    if not argv or Path(argv[0]).name not in MANAGE_PROGRAMS:
        return False
    args = argv[1:]
    return not args or args[0] in HELP_ARGS or "--help" in args or "-h" in args


def _secret_key() -> str:
    """SECRET_KEY from the environment, else from the key file ``make demo`` writes.

    Without either, a real run stops with one line saying what to do (an exception here
    would print Django's 40-line traceback instead); ``--help`` gets a throwaway key.
    """
    key = env_str("SECRET_KEY")
    if key:
        return key
    key_file = Path(env_str("TRAFFICMGR_SECRET_KEY_FILE", str(VAR_DIR / "secret_key")))
    if key_file.is_file():
        return key_file.read_text().strip()
    if DEBUG:
        return "insecure-debug-only-key-" + "x" * 40
    if _only_help(sys.argv):
        return secrets.token_urlsafe(50)
    raise SystemExit(
        f"trafficmgr: SECRET_KEY is not set and {key_file} does not exist: run `make demo` "
        "(it writes that file) or export SECRET_KEY=$(python3 -c 'import secrets; "
        "print(secrets.token_urlsafe(50))')"
    )


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "regions",
    "dashboard",
]

MIDDLEWARE = [
    # Outermost: a store outage or an unexpected error is never Django's HTML 500.
    "regions.middleware.ErrorFormatMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "regions.middleware.BodySizeLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "regions.audit.trail.AuditContextMiddleware",
]

ROOT_URLCONF = "trafficmgr.urls"
ASGI_APPLICATION = "trafficmgr.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'trafficmgr.sqlite3'}")
DATABASES = {"default": database_from_url(DATABASE_URL, str(BASE_DIR))}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
elif env_bool("TRAFFICMGR_DB_POOL", True):
    # One connection pool per process (Django's psycopg pool) instead of a connection per
    # thread kept CONN_MAX_AGE: under ASGI every request runs in a thread of its own, so
    # connections grew with concurrency until the server's limit. A process holds at most
    # TRAFFICMGR_DB_POOL_MAX connections (default 8: 2 web workers, 2 celery processes and
    # beat hold at most 40, far below PostgreSQL's 100) and waits TRAFFICMGR_DB_POOL_TIMEOUT_S
    # (default 2) for a free one.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "connect_timeout": 2,
        **DATABASES["default"]["OPTIONS"],  # type: ignore[dict-item]
        "pool": {
            "min_size": 0,
            "max_size": env_int("TRAFFICMGR_DB_POOL_MAX", 8),
            "timeout": env_float("TRAFFICMGR_DB_POOL_TIMEOUT_S", 2.0),
            "max_idle": 60.0,
            # Give up a failing connection attempt after 1 s, so that the next request starts
            # a fresh one: psycopg_pool's own backoff (doubling up to 5 min) kept a pool
            # refusing requests for about as long as the outage had lasted.
            "reconnect_timeout": 1.0,
        },
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")

if REDIS_URL:
    # A Redis that accepts and never answers (a partition, a peer wedged) must cost a request
    # a second, not hang it: redis-py before 6 waits forever by default, 6 and later 5 s. The
    # cache only counts rate limits and holds drill progress; its callers fail open or 503.
    CACHE_TIMEOUT_S = env_float("TRAFFICMGR_CACHE_TIMEOUT_S", 1.0)
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {
                "socket_connect_timeout": CACHE_TIMEOUT_S,
                "socket_timeout": CACHE_TIMEOUT_S,
            },
        }
    }
    # channels_redis waits up to 5 s in BZPOPMIN for a message; redis-py >= 6 gives every read
    # a 5 s socket timeout by default, so a quiet spell raised TimeoutError in the receive and
    # ended the dashboards' relay. Reads may block longer than the layer's own wait.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15}]},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Celery: Redis as broker when configured, else tasks run eagerly in-process.
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "static")))

DATA_UPLOAD_MAX_MEMORY_SIZE = 1_048_576
DATA_UPLOAD_MAX_NUMBER_FIELDS = 10_000

SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if not DEBUG:
    # Behind TLS in production; the embedded demo on loopback turns these off explicitly.
    _tls = env_bool("TRAFFICMGR_TLS", True)
    SESSION_COOKIE_SECURE = _tls
    CSRF_COOKIE_SECURE = _tls
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", _tls)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000 if _tls else 0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _tls
    SECURE_HSTS_PRELOAD = _tls
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "regions.access.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["regions.access.permissions.RolePermission"],
    "DEFAULT_PARSER_CLASSES": [
        "regions.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "regions.api.pagination.Pagination",
    "PAGE_SIZE": 100,
    "DEFAULT_FILTER_BACKENDS": [],
    "DEFAULT_SCHEMA_CLASS": "regions.api.schema.AutoSchema",
    "EXCEPTION_HANDLER": "regions.api.errors.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["regions.api.throttling.TokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "token": env_str("TRAFFICMGR_API_RATE", "6000/min"),
        "loop": env_str("TRAFFICMGR_LOOP_RATE", "120000/min"),
    },
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "trafficmgr API",
    "DESCRIPTION": "Global traffic manager for AI inference fleets.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "DrillStatusEnum": "regions.models.drills.DrillStatus",
        "EventNameEnum": "regions.alerts.rules.EVENT_NAMES",
        "NotificationStatusEnum": "regions.models.alerts.NotificationStatus",
        "SeverityEnum": "regions.models.alerts.Severity",
    },
}

# trafficmgr's own settings.
TRAFFICMGR = {
    "GEOIP_DB": env_str("TRAFFICMGR_GEOIP_DB"),
    "FLEET_FILE": env_str("TRAFFICMGR_FLEET_FILE", str(BASE_DIR / "examples" / "fleet.yaml")),
    "TICK_SECONDS": env_float("TRAFFICMGR_TICK_SECONDS", 1.0),
    "HEARTBEAT_RETENTION_DAYS": env_int("TRAFFICMGR_HEARTBEAT_RETENTION_DAYS", 7),
    "REQUIRE_SERVICES": env_bool("TRAFFICMGR_REQUIRE_SERVICES", False),
    # Empty: /metrics is open (scrape it from inside the network); set: Bearer required.
    "METRICS_TOKEN": env_str("TRAFFICMGR_METRICS_TOKEN"),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

os.makedirs(VAR_DIR, exist_ok=True)
