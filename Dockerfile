# writesafe: the HTTP service (`writesafe serve`), the reconciliation worker
# (`writesafe reconcile … --watch`) and the migration step (`writesafe db upgrade`) share this image.
# Your application module (the `module:ws` the commands load) must be in the image: it is imported
# from the working directory, /app, where the build context is copied.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY . .
RUN pip install '.[service]' \
    && useradd --system --no-create-home --home-dir /app writesafe \
    && chown -R writesafe /app
USER writesafe

EXPOSE 8000
ENTRYPOINT ["writesafe"]
CMD ["--help"]
