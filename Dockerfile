FROM node:20-bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap runsc socat ca-certificates fuse3 \
  && rm -rf /var/lib/apt/lists/*
COPY --from=flyio/litefs:0.5 /usr/local/bin/litefs /usr/local/bin/litefs
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci
COPY . .
ENTRYPOINT ["litefs", "mount"]
