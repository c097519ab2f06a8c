package wire

// wire.pb.go is generated from wire.proto and committed. To regenerate, with protoc
// (Debian: protobuf-compiler) and protoc-gen-go v1.36.12 on PATH
// (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12):
//
//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative wire.proto
