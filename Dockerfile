# agentd in one container, anywhere:
#   docker build -t agentd .
#   docker run --privileged -v agentd-data:/data -p 8787:8787 agentd
# --privileged: agentd mounts each sandbox's disk image and makes cgroups and network namespaces
# for gVisor and bubblewrap, which an unprivileged container cannot. Data lives in the /data volume.
FROM node:22-bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap runsc socat e2fsprogs mount ca-certificates curl \
  && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
# Bun, the three agent CLIs and Litestream come from npm at the versions the lockfile pins.
RUN npm ci --omit=dev
COPY . .
ENV DATA_DIR=/data HOST=0.0.0.0 PORT=8787
VOLUME /data
EXPOSE 8787
HEALTHCHECK --interval=15s --timeout=2s CMD ["node", "-e", "fetch('http://127.0.0.1:8787/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
CMD ["node_modules/.bin/bun", "src/main.ts"]
