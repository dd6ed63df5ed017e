# One Dockerfile for the four binaries:
#   docker build --build-arg SERVICE=ipam -t ipledger/ipam:v0.1.0 .
# Multi-stage: a static binary on a distroless, non-root base.
FROM golang:1.26 AS build
ARG SERVICE
WORKDIR /src
COPY . .
RUN test -n "$SERVICE" || (echo "set --build-arg SERVICE=watcher|ipam|endpoints|eipd" && false)
RUN --mount=type=cache,target=/root/.cache/go-build --mount=type=cache,target=/go/pkg/mod \
    cd services/$SERVICE && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ipledger ./cmd/ipledger-$SERVICE

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ipledger /ipledger
USER 65532:65532
ENTRYPOINT ["/ipledger"]
