# One Dockerfile for the five binaries, for users with Docker:
#   docker build --build-arg SERVICE=ipam --build-arg VERSION=$(cat VERSION) --build-arg REVISION=$(git rev-parse HEAD) \
#     -t ghcr.io/ipledger/ipam:v$(cat VERSION) .
# A static binary on an empty base with the CA bundle, run as 65532:65532.
# `make images` builds the same images without Docker (lab/containerimage);
# its TestDockerfileMatchesSettings fails when this file and it disagree on
# the build flags, the base, the files, the user or the entrypoint.
FROM golang:1.27 AS build
ARG SERVICE
ARG VERSION=0.0.0-unstamped
ARG REVISION=unknown
WORKDIR /src
COPY . .
RUN test -n "$SERVICE" || (echo "set --build-arg SERVICE=watcher|ipam|endpoints|eipd|signer" && false)
RUN --mount=type=cache,target=/root/.cache/go-build --mount=type=cache,target=/go/pkg/mod \
    CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -ldflags "-s -w -X github.com/ipledger/ipledger/pkg/version.version=${VERSION} -X github.com/ipledger/ipledger/pkg/version.revision=${REVISION}" -o /out/ipledger ./services/$SERVICE/cmd/ipledger-$SERVICE

FROM scratch
ARG SERVICE
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.revision="$REVISION" org.opencontainers.image.source="https://github.com/ipledger/ipledger" \
      org.opencontainers.image.title="ipledger-$SERVICE" org.opencontainers.image.version="$VERSION"
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/ipledger /ipledger
USER 65532:65532
ENTRYPOINT ["/ipledger"]
