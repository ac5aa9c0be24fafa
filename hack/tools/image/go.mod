// Module image pins go-containerregistry and holds build-image, which writes
// the project's container images (fencegate, and the test node's pause and
// helper images) from files on disk, with no container engine.
module github.com/fencegate/fencegate/hack/tools/image

go 1.26.0

tool github.com/fencegate/fencegate/hack/tools/image/build-image

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
