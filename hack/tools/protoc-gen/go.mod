// Module protoc-gen pins the protoc plugins that generate the fence API's Go
// code; protoc-gen-go matches the protobuf runtime of the main module.
module github.com/fencegate/fencegate/hack/tools/protoc-gen

go 1.26.0

tool (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc
	google.golang.org/protobuf/cmd/protoc-gen-go
)

require (
	google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
