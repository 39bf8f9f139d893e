"""What an outage of a service the platform needs raises: the one list, for every caller.

Redis (broker, lease, channel layer) surfaces as redis-py's own errors or wrapped by kombu;
PostgreSQL as Django's ``OperationalError`` (unreachable, or no pooled connection within
DATABASE_POOL_TIMEOUT under a burst). Requests and sockets answer these with 503 / close 4503;
handing a task to the broker also hears the socket-level errors the transport can raise.
"""

from django.db import OperationalError as DatabaseOperationalError
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Redis is down or does not answer, however it reached us.
REDIS_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    KombuOperationalError,
)

# A service a request or a socket needs is down or saturated: Redis, or PostgreSQL.
OUTAGE_ERRORS: tuple[type[Exception], ...] = (*REDIS_ERRORS, DatabaseOperationalError)

# Publishing to the broker: Redis's errors, and the socket errors its transport can raise.
BROKER_ERRORS: tuple[type[Exception], ...] = (*REDIS_ERRORS, ConnectionError, TimeoutError)
