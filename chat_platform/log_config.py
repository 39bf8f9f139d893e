"""structlog configuration: JSON lines in real mode, readable console lines in embedded mode."""

import logging
import logging.config

import structlog


def configure_logging(*, level: str, json: bool) -> None:  # noqa: A002 - mirrors the setting name
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "structlog": {
                    "()": structlog.stdlib.ProcessorFormatter,
                    "processors": [
                        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                        renderer,
                    ],
                    "foreign_pre_chain": shared,
                }
            },
            "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "structlog"}},
            "root": {"handlers": ["default"], "level": level},
            "loggers": {
                "LiteLLM": {"level": "WARNING"},
                "httpx": {"level": "WARNING"},
                "daphne": {"level": "WARNING"},
            },
        }
    )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
