// Command memkafka serves Quire's Kafka front end (internal/kafka) over the
// in-memory test backend (internal/kafka/kafkatest) with the real classic
// group coordinator (internal/kafka/group) on an in-memory metadata store. It
// exists so the client harnesses in interop/ can exercise the front end and
// the group coordinator before `quire standalone` serves Kafka; nothing is
// durable and it must never be used for anything but such checks. Once the
// standalone serves Kafka, run the harnesses against it instead.
//
//	go run ./interop/memkafka --addr 127.0.0.1:9092
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"quire/internal/kafka"
	"quire/internal/kafka/group"
	"quire/internal/kafka/kafkatest"
	"quire/internal/meta"
)

// backend is the in-memory backend with its offsets-only Groups replaced by
// the real coordinator, so consumer groups rebalance as they would in Quire.
type backend struct {
	*kafkatest.Backend
	groups kafka.GroupCoordinator
}

func (b backend) Groups() kafka.GroupCoordinator { return b.groups }

func main() {
	addr := flag.String("addr", "127.0.0.1:9092", "address to serve Kafka on")
	verbose := flag.Bool("v", false, "debug logging")
	flag.Parse()
	if err := run(*addr, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "memkafka:", err)
		os.Exit(1)
	}
}

func run(addr string, verbose bool) error {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	host, portText, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return err
	}

	store := meta.NewMemServer(meta.MemConfig{}).NewClient()
	coordinator, err := group.New(group.Config{Store: store, Logger: log})
	if err != nil {
		return fmt.Errorf("group coordinator: %w", err)
	}
	defer coordinator.Close()
	b := backend{
		Backend: kafkatest.New(kafka.Node{ID: 1, Host: host, Port: int32(port)}),
		groups:  coordinator,
	}
	server, err := kafka.New(kafka.Config{Backend: b, Logger: log})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		server.Close()
	}()
	log.Info("memkafka serving", "addr", ln.Addr().String())
	if err := server.Serve(ln); err != nil && err != kafka.ErrServerClosed {
		return err
	}
	return nil
}
