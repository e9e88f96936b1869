FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

WORKDIR /app

# OCR of scanned PDF pages (Russian and English); without it such files are refused, saying so.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tesseract-ocr tesseract-ocr-rus tesseract-ocr-eng tesseract-ocr-osd \
    && rm -rf /var/lib/apt/lists/*

COPY requirements.txt .
# Production builds may want the CPU-only torch wheel (much smaller than the default CUDA one):
#   pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt
RUN pip install --no-cache-dir -r requirements.txt

RUN useradd --create-home --uid 1000 mindsearch \
    && mkdir -p /data \
    && chown mindsearch:mindsearch /data
COPY --chown=mindsearch:mindsearch . .
USER mindsearch

EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "mindsearch.asgi:application"]
