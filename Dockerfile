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
# The dependencies first, in a layer of their own (most of the build's
# time): a change to src/ or config/ then rebuilds only Junction. Built
# against stand-in sources, whose own artifacts are removed after.
RUN mkdir src \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked --bin junction \
    && rm -rf src target/release/junction target/release/deps/junction-* \
        target/release/deps/libjunction-* target/release/.fingerprint/junction-*
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
# Healthy = /readyz says 200 (every mount's first start has finished), on
# the port JUNCTION_SERVER__LISTEN names. The image has no curl or wget;
# bash (in debian-slim) speaks HTTP over /dev/tcp. A `--listen` given on
# the command line instead is not seen here: set the variable.
HEALTHCHECK --interval=10s --timeout=3s --start-period=40s --retries=3 \
    CMD ["bash", "-c", "port=${JUNCTION_SERVER__LISTEN##*:}; exec 3<>/dev/tcp/127.0.0.1/${port:-8080} && printf 'GET /readyz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
# tini is PID 1: it forwards signals to Junction and reaps orphaned
# grandchildren of stdio upstreams (a wrapper's children, npx -> node), which
# Junction kills with their process group but does not wait for.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/junction"]
