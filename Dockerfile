FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY chat_platform ./chat_platform
COPY bots ./bots
COPY compaction ./compaction
COPY memory ./memory
RUN pip install --no-cache-dir .
COPY . .
RUN DEBUG=true python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["uvicorn", "chat_platform.asgi:application", "--host", "0.0.0.0", "--port", "8000", "--timeout-graceful-shutdown", "5", "--ws-max-size", "8388608"]
