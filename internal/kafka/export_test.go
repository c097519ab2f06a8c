package kafka

import "context"

// ServeFrame runs one request frame (without its size prefix) through the
// decode, submit and finish path and returns the response frame (with its
// size prefix; empty when there is none) or the error that would close the
// connection. For the fuzz test.
func (s *Server) ServeFrame(ctx context.Context, frame []byte) ([]byte, error) {
	item, err := s.submit(ctx, frame)
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
