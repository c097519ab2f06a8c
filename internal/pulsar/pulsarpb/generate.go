// Package pulsarpb is Pulsar's binary-protocol schema (PulsarApi.proto,
// proto2, from apache/pulsar-client-go v0.21.0) compiled for Quire. Only the
// proto package name and go_package differ from upstream, so that this copy
// and pulsar-client-go's can live in one test binary (protobuf's registry
// refuses two files or packages of one name). The generated code is
// committed: building needs no protoc.
package pulsarpb

// The file is registered under its path from the module root
// (internal/pulsar/pulsarpb/PulsarApi.proto), not upstream's bare
// "PulsarApi.proto", for the same reason as the package name.
//go:generate protoc --proto_path=../../.. --go_out=../../.. --go_opt=paths=source_relative internal/pulsar/pulsarpb/PulsarApi.proto

// protoc-gen-go aligns one struct of this file differently from gofmt,
// which CI checks on every file.
//go:generate gofmt -w PulsarApi.pb.go
