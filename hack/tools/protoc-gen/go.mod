// Module protoc-gen pins the protoc plugins that generate the fence API's Go
// code, and holds protoc-lite, which compiles fence.proto (with protocompile)
// and runs them. protoc-gen-go matches the protobuf runtime of the main
// module.
module github.com/fencegate/fencegate/hack/tools/protoc-gen

go 1.26.0

tool (
	github.com/fencegate/fencegate/hack/tools/protoc-gen/protoc-lite
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	github.com/bufbuild/protocompile v0.14.1
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/sync v0.25.0 // indirect
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
)
