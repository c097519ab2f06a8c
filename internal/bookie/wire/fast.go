package wire

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Fast paths for the add request and its OK response, the bookie's hot path. The encoders
// produce exactly the bytes proto.Marshal produces for the same message (fields in number
// order, proto3 defaults omitted), without building a message; the decoders read the frame
// without allocating. A frame in any other valid encoding (a field repeated, an unknown
// field, an error message) falls back to the generic protobuf decoder, so the accepted wire
// format is wire.proto's, nothing narrower. fast_test.go checks both directions against
// the generated code, and FuzzFastDecode checks that the fast decoders never disagree with
// it.

// Field numbers of wire.proto used by the fast paths.
const (
	fieldRequestID  = 1 // Request.request_id, Response.request_id
	fieldRequestAdd = 2 // Request.add

	fieldAddLedgerID         = 1 // AddRequest.ledger_id, AddResponse.ledger_id
	fieldAddEntryID          = 2 // AddRequest.entry_id, AddResponse.entry_id
	fieldAddLastAddConfirmed = 3
	fieldAddRecovery         = 4
	fieldAddPayload          = 5

	fieldResponseStatus = 2
	fieldResponseAdd    = 4
)

// AddFields are the fields of an AddRequest.
type AddFields struct {
	LedgerID         int64
	EntryID          int64
	LastAddConfirmed int64
	Recovery         bool
	Payload          []byte
}

// AddRequestFrame is an add request decoded by FrameReader.ReadRequestOrAdd. Its Payload
// aliases the reader's buffer: it is valid only until the reader's next call.
type AddRequestFrame struct {
	RequestID uint64
	AddFields
}

// AddResponseFrame is an add response decoded by FrameReader.ReadResponseOrAdd: a status
// without error message, with or without the add body.
type AddResponseFrame struct {
	RequestID uint64
	Status    Status
	HasAdd    bool // the response carries an AddResponse body
	LedgerID  int64
	EntryID   int64
}

func sizeVarintField(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v) // every field number here fits a one-byte tag
}

func appendVarintField(dst []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return dst
	}
	dst = protowire.AppendTag(dst, num, protowire.VarintType)
	return protowire.AppendVarint(dst, v)
}

func boolToUint64(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// AppendAddRequestFrame appends the frame of Request{request_id: requestID, add: a}: the
// same bytes as AppendFrame of that message. On error dst is returned unchanged.
func AppendAddRequestFrame(dst []byte, requestID uint64, a *AddFields) ([]byte, error) {
	addSize := sizeVarintField(uint64(a.LedgerID)) +
		sizeVarintField(uint64(a.EntryID)) +
		sizeVarintField(uint64(a.LastAddConfirmed)) +
		sizeVarintField(boolToUint64(a.Recovery))
	if len(a.Payload) > 0 {
		addSize += 1 + protowire.SizeBytes(len(a.Payload))
	}
	size := sizeVarintField(requestID) + 1 + protowire.SizeBytes(addSize)
	if uint64(size) > math.MaxUint32 {
		return dst, fmt.Errorf("%w: add request encodes to %d bytes", ErrFrameTooLarge, size)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	dst = appendVarintField(dst, fieldRequestID, requestID)
	dst = protowire.AppendTag(dst, fieldRequestAdd, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(addSize))
	dst = appendVarintField(dst, fieldAddLedgerID, uint64(a.LedgerID))
	dst = appendVarintField(dst, fieldAddEntryID, uint64(a.EntryID))
	dst = appendVarintField(dst, fieldAddLastAddConfirmed, uint64(a.LastAddConfirmed))
	dst = appendVarintField(dst, fieldAddRecovery, boolToUint64(a.Recovery))
	if len(a.Payload) > 0 {
		dst = protowire.AppendTag(dst, fieldAddPayload, protowire.BytesType)
		dst = protowire.AppendBytes(dst, a.Payload)
	}
	return dst, nil
}

// AppendAddOKResponseFrame appends the frame of Response{request_id: requestID, status: OK,
// add: {ledger_id, entry_id}}: the same bytes as AppendFrame of that message.
func AppendAddOKResponseFrame(dst []byte, requestID uint64, ledgerID, entryID int64) []byte {
	addSize := sizeVarintField(uint64(ledgerID)) + sizeVarintField(uint64(entryID))
	size := sizeVarintField(requestID) + sizeVarintField(uint64(Status_OK)) + 1 + protowire.SizeBytes(addSize)
	dst = binary.BigEndian.AppendUint32(dst, uint32(size)) // < 64 bytes
	dst = appendVarintField(dst, fieldRequestID, requestID)
	dst = appendVarintField(dst, fieldResponseStatus, uint64(Status_OK))
	dst = protowire.AppendTag(dst, fieldResponseAdd, protowire.BytesType)
	dst = protowire.AppendVarint(dst, uint64(addSize))
	dst = appendVarintField(dst, fieldAddLedgerID, uint64(ledgerID))
	dst = appendVarintField(dst, fieldAddEntryID, uint64(entryID))
	return dst
}

// fieldSet records which field numbers (1..63) a message decoder has seen, to send a
// repeated field to the generic decoder (protobuf merges or overrides repeats; the fast
// path does not try to).
type fieldSet uint64

// add marks num seen and reports whether it was new.
func (s *fieldSet) add(num protowire.Number) bool {
	bit := fieldSet(1) << uint(num&63)
	if *s&bit != 0 {
		return false
	}
	*s |= bit
	return true
}

// nextField consumes one field of a kind the fast path knows: a varint or a length-delimited
// field, each number at most once. ok=false sends the frame to the generic decoder.
func nextField(b []byte, seen *fieldSet) (num protowire.Number, typ protowire.Type, v uint64, data []byte, rest []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num > 63 || !seen.add(num) {
		return 0, 0, 0, nil, nil, false
	}
	b = b[n:]
	switch typ {
	case protowire.VarintType:
		v, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		data, n = protowire.ConsumeBytes(b)
	default:
		return 0, 0, 0, nil, nil, false
	}
	if n < 0 {
		return 0, 0, 0, nil, nil, false
	}
	return num, typ, v, data, b[n:], true
}

// decodeAddRequest decodes body as a Request with an add body, in the encoding proto.Unmarshal
// would give the same fields for. ok=false means "not an add in a form the fast path
// takes": the caller decodes body generically.
func decodeAddRequest(body []byte, out *AddRequestFrame) bool {
	*out = AddRequestFrame{}
	var seen fieldSet
	var add []byte
	hasAdd := false
	for len(body) > 0 {
		num, typ, v, data, rest, ok := nextField(body, &seen)
		switch {
		case !ok:
			return false
		case num == fieldRequestID && typ == protowire.VarintType:
			out.RequestID = v
		case num == fieldRequestAdd && typ == protowire.BytesType:
			add, hasAdd = data, true
		default:
			return false
		}
		body = rest
	}
	if !hasAdd {
		return false
	}
	seen = 0
	for len(add) > 0 {
		num, typ, v, data, rest, ok := nextField(add, &seen)
		if !ok {
			return false
		}
		switch {
		case num == fieldAddLedgerID && typ == protowire.VarintType:
			out.LedgerID = int64(v)
		case num == fieldAddEntryID && typ == protowire.VarintType:
			out.EntryID = int64(v)
		case num == fieldAddLastAddConfirmed && typ == protowire.VarintType:
			out.LastAddConfirmed = int64(v)
		case num == fieldAddRecovery && typ == protowire.VarintType:
			out.Recovery = protowire.DecodeBool(v)
		case num == fieldAddPayload && typ == protowire.BytesType:
			out.Payload = data
		default:
			return false
		}
		add = rest
	}
	return true
}

// decodeAddResponse decodes body as a Response with a status, no error message and at most
// an add body. ok=false sends the caller to the generic decoder (which also reports a
// missing status as malformed).
func decodeAddResponse(body []byte, out *AddResponseFrame) bool {
	*out = AddResponseFrame{}
	var seen fieldSet
	var add []byte
	for len(body) > 0 {
		num, typ, v, data, rest, ok := nextField(body, &seen)
		switch {
		case !ok:
			return false
		case num == fieldRequestID && typ == protowire.VarintType:
			out.RequestID = v
		case num == fieldResponseStatus && typ == protowire.VarintType:
			out.Status = Status(int32(v))
		case num == fieldResponseAdd && typ == protowire.BytesType:
			add, out.HasAdd = data, true
		default:
			return false
		}
		body = rest
	}
	if out.Status == Status_STATUS_UNSPECIFIED {
		return false
	}
	seen = 0
	for len(add) > 0 {
		num, typ, v, _, rest, ok := nextField(add, &seen)
		if !ok || typ != protowire.VarintType {
			return false
		}
		switch num {
		case fieldAddLedgerID:
			out.LedgerID = int64(v)
		case fieldAddEntryID:
			out.EntryID = int64(v)
		default:
			return false
		}
		add = rest
	}
	return true
}

// ReadRequestOrAdd reads one request frame. An add request in the usual encoding is decoded
// into *add without allocating (isAdd true, req nil); its Payload is valid only until the
// next call. Any other request comes back as ReadRequest returns it (an add in an unusual
// encoding too). Errors as for ReadRequest.
func (fr *FrameReader) ReadRequestOrAdd(add *AddRequestFrame) (req *Request, isAdd bool, err error) {
	body, err := fr.readFrame(false)
	if err != nil {
		return nil, false, err
	}
	if decodeAddRequest(body, add) {
		return nil, true, nil
	}
	req, err = fr.unmarshalRequest(body)
	return req, false, err
}

// ReadResponseOrAdd reads one response frame. A response with a status, no error message
// and at most an add body is decoded into *add without allocating (isAdd true, resp nil).
// Any other response comes back as ReadResponse returns it. Errors as for ReadResponse.
//
// A batch-read response larger than the buffered reader's buffer is decoded with its
// entries' payloads aliasing the frame's buffer, which the reader gives up to the caller
// (no copy of the payloads; the next large frame gets a new buffer).
func (fr *FrameReader) ReadResponseOrAdd(add *AddResponseFrame) (resp *Response, isAdd bool, err error) {
	body, err := fr.readFrame(true)
	if err != nil {
		return nil, false, err
	}
	if decodeAddResponse(body, add) {
		return nil, true, nil
	}
	if len(body) > fr.r.Size() {
		if resp, ok := decodeBatchReadResponse(body); ok {
			fr.buf = nil // the payloads alias it: it is the caller's now
			return resp, false, nil
		}
	}
	resp, err = fr.unmarshalResponse(body)
	return resp, false, err
}
