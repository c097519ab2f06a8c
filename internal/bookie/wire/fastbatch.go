package wire

import "google.golang.org/protobuf/encoding/protowire"

// The batch read's answer is the frame a catch-up reader receives most bytes in: up to a
// range's worth of entries, megabytes. The generic decoder copies every payload out of the
// frame (and the frame was grown into a buffer by copying already); this decoder instead
// leaves the payloads in the frame's own buffer, which the FrameReader then gives up to the
// caller. The accepted encodings are a subset of what proto.Unmarshal takes for the same
// message, with the same result (FuzzFastDecode); anything else goes to the generic decoder.

const (
	fieldResponseBatchRead = 7 // Response.batch_read
	fieldBatchReadEntries  = 1 // BatchReadResponse.entries

	fieldEntryLedgerID         = 1
	fieldEntryEntryID          = 2
	fieldEntryLastAddConfirmed = 3
	fieldEntryPayload          = 4
)

// decodeBatchReadResponse decodes body as a Response with a status, no error message and a
// batch-read body, the entries' payloads aliasing body. ok=false sends the caller to the
// generic decoder.
func decodeBatchReadResponse(body []byte) (*Response, bool) {
	var seen fieldSet
	var batch []byte
	hasBatch := false
	resp := &Response{}
	for len(body) > 0 {
		num, typ, v, data, rest, ok := nextField(body, &seen)
		switch {
		case !ok:
			return nil, false
		case num == fieldRequestID && typ == protowire.VarintType:
			resp.RequestId = v
		case num == fieldResponseStatus && typ == protowire.VarintType:
			resp.Status = Status(int32(v))
		case num == fieldResponseBatchRead && typ == protowire.BytesType:
			batch, hasBatch = data, true
		default:
			return nil, false
		}
		body = rest
	}
	if !hasBatch || resp.Status == Status_STATUS_UNSPECIFIED {
		return nil, false
	}
	br := &BatchReadResponse{}
	for len(batch) > 0 {
		// entries is repeated: the one field that may appear more than once.
		num, typ, n := protowire.ConsumeTag(batch)
		if n < 0 || num != fieldBatchReadEntries || typ != protowire.BytesType {
			return nil, false
		}
		data, m := protowire.ConsumeBytes(batch[n:])
		if m < 0 {
			return nil, false
		}
		e, ok := decodeEntry(data)
		if !ok {
			return nil, false
		}
		br.Entries = append(br.Entries, e)
		batch = batch[n+m:]
	}
	resp.Body = &Response_BatchRead{BatchRead: br}
	return resp, true
}

// decodeEntry decodes an Entry whose payload aliases b.
func decodeEntry(b []byte) (*Entry, bool) {
	var seen fieldSet
	e := &Entry{}
	for len(b) > 0 {
		num, typ, v, data, rest, ok := nextField(b, &seen)
		if !ok {
			return nil, false
		}
		switch {
		case num == fieldEntryLedgerID && typ == protowire.VarintType:
			e.LedgerId = int64(v)
		case num == fieldEntryEntryID && typ == protowire.VarintType:
			e.EntryId = int64(v)
		case num == fieldEntryLastAddConfirmed && typ == protowire.VarintType:
			e.LastAddConfirmed = int64(v)
		case num == fieldEntryPayload && typ == protowire.BytesType:
			if len(data) > 0 {
				// proto.Unmarshal leaves an empty bytes field nil in proto3.
				e.Payload = data[:len(data):len(data)]
			}
		default:
			return nil, false
		}
		b = rest
	}
	return e, true
}
