# Junction gateway image.
#   docker build -t junction .
#   docker run -p 8080:8080 -v $PWD/conf:/etc/junction:ro \
#     -e JUNCTION_SERVER__ALLOWED_HOSTS='["localhost", "127.0.0.1", "::1"]' junction
# The image serves /etc/junction/junction.toml if mounted, else the embedded
# default config; it listens on 0.0.0.0:8080 (JUNCTION_SERVER__LISTEN).
# Mount the directory holding junction.toml, not the file: a bind-mounted
# file keeps its old content once an editor replaces it, so hot reload never
# sees the edit.
FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY config ./config
RUN cargo build --release --locked --bin junction

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 999 --user-group --home /var/lib/junction --create-home junction
COPY --from=build /src/target/release/junction /usr/local/bin/junction
USER junction
WORKDIR /etc/junction
# Environment variables win over the config file, so an allowed_hosts in a
# mounted junction.toml is ignored in this image: ["*"] (no Host check)
# holds unless overridden with docker run
# -e JUNCTION_SERVER__ALLOWED_HOSTS='[...]' (as deploy/ does).
ENV JUNCTION_SERVER__LISTEN=0.0.0.0:8080 \
    JUNCTION_SERVER__ALLOWED_HOSTS='["*"]'
EXPOSE 8080
# tini is PID 1: it forwards signals to Junction and reaps orphaned
# grandchildren of stdio upstreams (a wrapper's children, npx -> node), which
# Junction kills with their process group but does not wait for.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/junction"]
