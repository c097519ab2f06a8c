package kafka

import "context"

// ServeFrame runs one request frame (without its size prefix) through the
// decode, submit and finish path and returns the response frame (with its
// size prefix; empty when there is none) or the error that would close the
// connection. For the fuzz test.
func (s *Server) ServeFrame(ctx context.Context, frame []byte) ([]byte, error) {
	item, err := s.submit(ctx, &connState{versions: &s.versions}, frame)
	if err != nil {
		return nil, err
	}
	out, pieces, err := s.complete(ctx, item, nil)
	if pieces != nil {
		out = nil
		for _, p := range pieces {
			out = append(out, p...)
		}
	}
	return out, err
}

// SASLFrame is what ServeSASLFrames saw of one frame.
type SASLFrame struct {
	Key int16 // the request's API key (SASLAuthenticate for a raw token)
	// Authenticated: the connection had completed authentication before
	// this frame.
	Authenticated bool
}

// ServeSASLFrames runs frames through one connection of a listener with
// sec, as its reader and writer would, until one closes the connection;
// it returns what each frame that was answered saw. For the fuzz test.
func (s *Server) ServeSASLFrames(ctx context.Context, sec *Security, frames [][]byte) []SASLFrame {
	versions := supportedVersions(s.withGroups, s.withTxns, sec)
	cs := &connState{remote: "fuzz", sec: sec, versions: &versions, sasl: &saslConn{sec: sec}}
	var out []SASLFrame
	for _, frame := range frames {
		if int32(len(frame)) > cs.sasl.maxFrame(s.maxFrameBytes) {
			return out
		}
		authenticated := cs.sasl.phase == phaseComplete
		item, err := s.submit(ctx, cs, frame)
		if err != nil {
			return out
		}
		out = append(out, SASLFrame{Key: item.rq.key, Authenticated: authenticated})
		if _, _, err := s.complete(ctx, item, nil); err != nil || item.last {
			return out
		}
	}
	return out
}
