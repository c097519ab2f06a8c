package main

import (
	"fmt"
	"net"
	"strings"

	"github.com/spf13/pflag"

	"quire/internal/broker"
	"quire/internal/kafka"
	"quire/internal/tlsconf"
)

// Several Kafka listeners with different security, as Kafka's listeners,
// advertised.listeners and listener.security.protocol.map: e.g. plaintext
// for clients inside a private network and SASL_SSL for everyone else. The
// first listener is the one brokers fetch from each other on (ISR mode)
// and register as their Kafka address; clients are told the brokers'
// endpoints of the listener they came in on.

// Kafka's security protocols.
const (
	protocolPlaintext     = "PLAINTEXT"
	protocolSSL           = "SSL"
	protocolSASLPlaintext = "SASL_PLAINTEXT"
	protocolSASLSSL       = "SASL_SSL"
)

// kafkaListenerFlags are --kafka-listeners and its companions.
type kafkaListenerFlags struct {
	listeners  []string // NAME://host:port
	advertised []string // NAME://host:port
	protocols  []string // NAME:PROTOCOL
}

func (k *kafkaListenerFlags) register(f *pflag.FlagSet) {
	f.StringSliceVar(&k.listeners, "kafka-listeners", nil, "several Kafka listeners, NAME://host:port each (Kafka's listeners), instead of --kafka-addr: each gets the security --kafka-listener-security-protocol-map gives its name (a name that is a protocol, e.g. PLAINTEXT or SASL_SSL, is its own), with the certificate of --kafka-tls-* and the mechanisms of --kafka-sasl-*; the first is the one brokers use among themselves. Clients are told each broker's endpoint of the listener they connected to")
	f.StringSliceVar(&k.advertised, "kafka-advertised-listeners", nil, "NAME://host:port clients of listener NAME are told (Kafka's advertised.listeners; default: the listen address)")
	f.StringSliceVar(&k.protocols, "kafka-listener-security-protocol-map", nil, "NAME:PROTOCOL for listeners whose name is not a protocol; PROTOCOL is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (Kafka's listener.security.protocol.map)")
}

// namedListener is one parsed --kafka-listeners entry.
type namedListener struct {
	name, addr, advertised, protocol string
}

// parse checks the flags and returns the listeners in order (nil when
// --kafka-listeners is not given).
func (k *kafkaListenerFlags) parse() ([]namedListener, error) {
	if len(k.listeners) == 0 {
		if len(k.advertised) > 0 || len(k.protocols) > 0 {
			return nil, fmt.Errorf("--kafka-advertised-listeners and --kafka-listener-security-protocol-map need --kafka-listeners")
		}
		return nil, nil
	}
	split := func(flag, v, sep string) (string, string, error) {
		name, rest, ok := strings.Cut(v, sep)
		if !ok || name == "" || rest == "" {
			return "", "", fmt.Errorf("%s %q: want NAME%shost:port", flag, v, sep)
		}
		return strings.ToUpper(name), rest, nil
	}
	protocols := map[string]string{}
	for _, v := range k.protocols {
		name, p, err := split("--kafka-listener-security-protocol-map", v, ":")
		if err != nil {
			return nil, err
		}
		protocols[name] = strings.ToUpper(p)
	}
	advertised := map[string]string{}
	for _, v := range k.advertised {
		name, addr, err := split("--kafka-advertised-listeners", v, "://")
		if err != nil {
			return nil, err
		}
		advertised[name] = addr
	}
	var out []namedListener
	seen := map[string]bool{}
	for _, v := range k.listeners {
		name, addr, err := split("--kafka-listeners", v, "://")
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("--kafka-listeners: %s given twice", name)
		}
		seen[name] = true
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--kafka-listeners %s: %w", name, err)
		}
		protocol, ok := protocols[name]
		if !ok {
			protocol = name
		}
		switch protocol {
		case protocolPlaintext, protocolSSL, protocolSASLPlaintext, protocolSASLSSL:
		default:
			return nil, fmt.Errorf("listener %s: security protocol %q: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (--kafka-listener-security-protocol-map)", name, protocol)
		}
		out = append(out, namedListener{name: name, addr: addr, advertised: advertised[name], protocol: protocol})
	}
	for name := range advertised {
		if !seen[name] {
			return nil, fmt.Errorf("--kafka-advertised-listeners: no listener named %s", name)
		}
	}
	return out, nil
}

// listenKafka opens the listeners of b's flags: the primary one (and the
// advertised address to register for it) and the others. Without
// --kafka-listeners it is --kafka-addr with the security the --kafka-tls-*
// and --kafka-sasl-* flags imply, as before.
func (b *brokerFlags) listenKafka(security kafka.Security) (net.Listener, string, []broker.ExtraKafkaListener, error) {
	named, err := b.kafkaListeners.parse()
	if err != nil {
		return nil, "", nil, err
	}
	if named == nil {
		ln, err := listen("kafka", b.kafkaAddr, b.kafkaTLS)
		if err != nil {
			return nil, "", nil, err
		}
		return &kafka.Listener{Listener: ln, Security: security}, b.kafkaAdvertised, nil, nil
	}
	if b.kafkaAdvertised != "" {
		return nil, "", nil, fmt.Errorf("--kafka-advertised-addr and --kafka-listeners: give --kafka-advertised-listeners instead")
	}
	var opened []net.Listener
	fail := func(err error) (net.Listener, string, []broker.ExtraKafkaListener, error) {
		for _, l := range opened {
			l.Close()
		}
		return nil, "", nil, err
	}
	var extra []broker.ExtraKafkaListener
	for _, n := range named {
		tlsFiles, sec := tlsconf.Files{}, security
		if n.protocol == protocolSSL || n.protocol == protocolSASLSSL {
			if !b.kafkaTLS.Enabled() {
				return fail(fmt.Errorf("listener %s (%s) needs --kafka-tls-cert and --kafka-tls-key", n.name, n.protocol))
			}
			tlsFiles = b.kafkaTLS
		}
		if n.protocol == protocolSASLPlaintext || n.protocol == protocolSASLSSL {
			if !security.SASL() {
				return fail(fmt.Errorf("listener %s (%s) needs --kafka-sasl-mechanisms", n.name, n.protocol))
			}
		} else {
			sec.Mechanisms = nil
		}
		ln, err := listen("kafka "+n.name, n.addr, tlsFiles)
		if err != nil {
			return fail(err)
		}
		opened = append(opened, ln)
		kl := &kafka.Listener{Listener: ln, Security: sec, Name: n.name}
		extra = append(extra, broker.ExtraKafkaListener{Listener: kl, Advertised: n.advertised})
	}
	return extra[0].Listener, extra[0].Advertised, extra[1:], nil
}
