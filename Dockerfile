# syntax=docker/dockerfile:1
#
# The fleetwatch binary, static, on distroless as the non-root user 65532.
#
#   make image IMAGE=registry.example.com/platform/fleetwatch:v0.1.0
#   docker run --rm IMAGE version
#   docker run --rm IMAGE serve --config /etc/fleetwatch/config.yaml   # what deploy/ runs
#
# The build stage runs on the builder's platform and cross-compiles for the target's
# (docker buildx build --platform linux/amd64,linux/arm64 ...).

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
# The version printed by "fleetwatch version" and served at /version; make image passes
# git describe, as make build does.
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/fleetwatch ./cmd/fleetwatch

# CA certificates and /etc/passwd for nonroot, nothing else: no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fleetwatch /usr/local/bin/fleetwatch
USER 65532:65532
# The binary is the entrypoint and "serve" the default command, so that the image also
# runs "version" and "snapshot inspect|verify".
ENTRYPOINT ["/usr/local/bin/fleetwatch"]
CMD ["serve"]
