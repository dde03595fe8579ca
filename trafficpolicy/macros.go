package trafficpolicy

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"math/big"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/parser"
)

// maxRange bounds lists.range(n): a list of n integers is n allocations the cost limit does not
// see until they are walked.
const maxRange = 10_000

// macros are ngrok's macros beside inCidrRange and inCidrRanges: CEL's own (size, matches,
// startsWith, all, exists, map, filter, has, the timestamp getters), cel-go's string, list and
// encoder extensions (charAt, indexOf, format, split, replace, join, slice, flatten,
// sort, sortBy, distinct, lists.range, base64.encode and decode, json.encode, …), and the ones ngrok adds, built
// here. secrets.get is declared (a document ngrok accepts compiles) but reads ngrok's vaults,
// which edgeplane does not have: a policy using it fails closed.
var macros = append(extensions,
	cel.Macros(
		// getReqHeader('X-Key') reads req.headers['x-key'], an empty list when absent; the same for
		// the other accessors of headers, query parameters and cookies.
		getter("hasReqHeader", "req", "headers", true, false), getter("getReqHeader", "req", "headers", true, true),
		getter("hasResHeader", "res", "headers", true, false), getter("getResHeader", "res", "headers", true, true),
		getter("hasQueryParam", "req", "url.query_params", false, false), getter("getQueryParam", "req", "url.query_params", false, true),
		getter("hasReqCookie", "req", "cookies", false, false), getter("getReqCookie", "req", "cookies", false, true),
		getter("hasResCookie", "res", "cookies", false, false), getter("getResCookie", "res", "cookies", false, true),
	),
	cel.Function("basic_auth.encode", cel.Overload("basic_auth_encode", []*cel.Type{cel.StringType, cel.StringType}, cel.StringType,
		cel.BinaryBinding(func(u, p ref.Val) ref.Val {
			return types.String("Basic " + base64.StdEncoding.EncodeToString([]byte(str(u)+":"+str(p))))
		}))),
	cel.Function("json.decode", cel.Overload("json_decode", []*cel.Type{cel.StringType}, cel.DynType, cel.UnaryBinding(jsonDecode))),
	cel.Function("decodeJson", cel.MemberOverload("string_decodeJson", []*cel.Type{cel.StringType}, cel.DynType, cel.UnaryBinding(jsonDecode))),
	cel.Function("encodeJson",
		cel.MemberOverload("list_encodeJson", []*cel.Type{cel.ListType(cel.DynType)}, cel.StringType, cel.UnaryBinding(jsonEncode)),
		cel.MemberOverload("map_encodeJson", []*cel.Type{cel.MapType(cel.DynType, cel.DynType)}, cel.StringType, cel.UnaryBinding(jsonEncode))),
	cel.Function("isJson", cel.MemberOverload("string_isJson", []*cel.Type{cel.StringType}, cel.BoolType,
		cel.UnaryBinding(func(s ref.Val) ref.Val { return types.Bool(json.Valid([]byte(str(s)))) }))),
	cel.Function("queryString.decode", cel.Overload("queryString_decode", []*cel.Type{cel.StringType}, cel.MapType(cel.StringType, cel.ListType(cel.StringType)), cel.UnaryBinding(queryDecode))),
	cel.Function("decodeQueryString", cel.MemberOverload("string_decodeQueryString", []*cel.Type{cel.StringType}, cel.MapType(cel.StringType, cel.ListType(cel.StringType)), cel.UnaryBinding(queryDecode))),
	cel.Function("queryString.encode", cel.Overload("queryString_encode", []*cel.Type{cel.MapType(cel.StringType, cel.DynType)}, cel.StringType, cel.UnaryBinding(queryEncode))),
	cel.Function("encodeQueryString", cel.MemberOverload("map_encodeQueryString", []*cel.Type{cel.MapType(cel.StringType, cel.DynType)}, cel.StringType, cel.UnaryBinding(queryEncode))),
	cel.Function("isQueryString", cel.MemberOverload("string_isQueryString", []*cel.Type{cel.StringType}, cel.BoolType,
		cel.UnaryBinding(func(s ref.Val) ref.Val { _, err := url.ParseQuery(str(s)); return types.Bool(err == nil) }))),
	cel.Function("decodeBase64", cel.MemberOverload("string_decodeBase64", []*cel.Type{cel.StringType}, cel.StringType,
		cel.UnaryBinding(func(s ref.Val) ref.Val {
			b, err := base64.StdEncoding.DecodeString(str(s))
			if err != nil {
				if b, err = base64.RawStdEncoding.DecodeString(str(s)); err != nil {
					return types.NewErr("decodeBase64: %v", err)
				}
			}
			return types.String(b)
		}))),
	cel.Function("encodeBase64", cel.MemberOverload("string_encodeBase64", []*cel.Type{cel.StringType}, cel.StringType,
		cel.UnaryBinding(func(s ref.Val) ref.Val { return types.String(base64.StdEncoding.EncodeToString([]byte(str(s)))) }))),
	cel.Function("escapeUrl", cel.MemberOverload("string_escapeUrl", []*cel.Type{cel.StringType}, cel.StringType, cel.UnaryBinding(urlEscape))),
	cel.Function("url.escape", cel.Overload("url_escape", []*cel.Type{cel.StringType}, cel.StringType, cel.UnaryBinding(urlEscape))),
	cel.Function("unescapeUrl", cel.MemberOverload("string_unescapeUrl", []*cel.Type{cel.StringType}, cel.StringType, cel.UnaryBinding(urlUnescape))),
	cel.Function("url.unescape", cel.Overload("url_unescape", []*cel.Type{cel.StringType}, cel.StringType, cel.UnaryBinding(urlUnescape))),
	cel.Function("parseUrl", cel.MemberOverload("string_parseUrl", []*cel.Type{cel.StringType}, cel.MapType(cel.StringType, cel.DynType), cel.UnaryBinding(urlParse))),
	cel.Function("url.parse", cel.Overload("url_parse", []*cel.Type{cel.StringType}, cel.MapType(cel.StringType, cel.DynType), cel.UnaryBinding(urlParse))),
	cel.Function("isURL", cel.MemberOverload("string_isURL", []*cel.Type{cel.StringType}, cel.BoolType,
		cel.UnaryBinding(func(s ref.Val) ref.Val {
			u, err := url.Parse(str(s))
			return types.Bool(err == nil && u.Scheme != "" && (u.Host != "" || u.Opaque != ""))
		}))),
	cel.Function("isPrivateIp", cel.MemberOverload("string_isPrivateIp", []*cel.Type{cel.StringType}, cel.BoolType,
		cel.UnaryBinding(func(s ref.Val) ref.Val {
			a, err := netip.ParseAddr(str(s))
			return types.Bool(err == nil && a.Unmap().Is4() && a.Unmap().IsPrivate())
		}))),
	cel.Function("lower", cel.MemberOverload("string_lower", []*cel.Type{cel.StringType}, cel.StringType,
		cel.UnaryBinding(func(s ref.Val) ref.Val { return types.String(strings.ToLower(str(s))) }))),
	cel.Function("upper", cel.MemberOverload("string_upper", []*cel.Type{cel.StringType}, cel.StringType,
		cel.UnaryBinding(func(s ref.Val) ref.Val { return types.String(strings.ToUpper(str(s))) }))),
	cel.Function("rand.double", cel.Overload("rand_double", nil, cel.DoubleType, cel.FunctionBinding(func(...ref.Val) ref.Val {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return types.Double(float64(binary.BigEndian.Uint64(b[:])>>11) / (1 << 53))
	}))),
	cel.Function("rand.int",
		cel.Overload("rand_int", nil, cel.IntType, cel.FunctionBinding(func(...ref.Val) ref.Val { return randInt(0, 1) })),
		cel.Overload("rand_int_int_int", []*cel.Type{cel.IntType, cel.IntType}, cel.IntType, cel.BinaryBinding(func(lo, hi ref.Val) ref.Val {
			return randInt(lo.Value().(int64), hi.Value().(int64))
		}))),
	cel.Function("secrets.get", cel.Overload(secretsOverload, []*cel.Type{cel.StringType, cel.StringType}, cel.StringType,
		cel.BinaryBinding(func(ref.Val, ref.Val) ref.Val { return types.NewErr("secrets.get: %s", noVaults) }))),
)

// extensions are cel-go's libraries among the macros. Their versions are the last before
// cel-go gave them cost trackers: a tracker option is carried by every program of the
// environment (about 2.5 KiB each, twice what a small expression's program holds), which would
// double what an account's policies cost in memory whether they call these functions or not.
// Without trackers each call counts once toward CostLimit; the values they work on are bounded
// by the request (headers, URL) and lists.range by maxRange, and loops over their results are
// counted element by element as any comprehension's.
var extensions = []cel.EnvOption{ext.Strings(ext.StringsVersion(4)), ext.Encoders(), ext.Lists(ext.ListsVersion(2), ext.ListsMaxRangeSize(maxRange))}

// secretsOverload is secrets.get's overload, which Policy.Unavailable looks for.
const secretsOverload = "secrets_get_string_string"

const noVaults = "edgeplane has no ngrok vaults to read secrets from: put the value in the policy"

func init() {
	hashes := map[string]func() hash.Hash{
		"md5": md5.New, "sha1": sha1.New, "sha256": sha256.New, "sha512": sha512.New,
		"crc32": func() hash.Hash { return crc32.NewIEEE() }, "crc64": func() hash.Hash { return crc64.New(crc64.MakeTable(crc64.ISO)) },
		"xxhash64": func() hash.Hash { return xxhash.New() },
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range hashes {
			if !yield(k) {
				return
			}
		}
	}) {
		h := hashes[name]
		sum := func(s, format ref.Val) ref.Val {
			d := h()
			d.Write([]byte(str(s)))
			switch f := str(format); f {
			case "", "hex":
				return types.String(hex.EncodeToString(d.Sum(nil)))
			case "base64":
				return types.String(base64.StdEncoding.EncodeToString(d.Sum(nil)))
			default:
				return types.NewErr("hash.%s: the format must be hex or base64, not %q", name, f)
			}
		}
		macros = append(macros,
			cel.Function("hash."+name,
				cel.Overload("hash_"+name, []*cel.Type{cel.StringType}, cel.StringType, cel.UnaryBinding(func(s ref.Val) ref.Val { return sum(s, types.String("")) })),
				cel.Overload("hash_"+name+"_format", []*cel.Type{cel.StringType, cel.StringType}, cel.StringType, cel.BinaryBinding(sum))),
			cel.Function(name, cel.MemberOverload("string_"+name, []*cel.Type{cel.StringType}, cel.StringType,
				cel.UnaryBinding(func(s ref.Val) ref.Val { return sum(s, types.String("")) }))))
	}
}

// getter is the macro name(key): whether key is in (has) or the values of (get: an empty list
// when absent) the map variable of root.field, the key lower-cased for header maps.
func getter(name, root, field string, lower, get bool) cel.Macro {
	return cel.GlobalMacro(name, 1, func(eh parser.ExprHelper, _ ast.Expr, args []ast.Expr) (ast.Expr, *common.Error) {
		m := eh.NewIdent(root)
		for f := range strings.SplitSeq(field, ".") {
			m = eh.NewSelect(m, f)
		}
		key := args[0]
		if lower {
			key = eh.NewMemberCall("lower", key)
		}
		in := eh.NewCall("@in", key, m)
		if !get {
			return in, nil
		}
		// The key expression is copied into each use; it is a literal in every example ngrok gives.
		val := eh.NewCall("_[_]", eh.Copy(m), eh.Copy(key))
		if root == "req" && field == "cookies" || root == "res" && field == "cookies" {
			val = eh.NewCall("_[_]", val, eh.NewLiteral(types.Int(0)))
			return eh.NewCall("_?_:_", in, val, eh.NewMap()), nil
		}
		return eh.NewCall("_?_:_", in, val, eh.NewList()), nil
	})
}

func str(v ref.Val) string {
	s, _ := v.Value().(string)
	return s
}

func jsonDecode(s ref.Val) ref.Val {
	var v any
	if err := json.Unmarshal([]byte(str(s)), &v); err != nil {
		return types.NewErr("json.decode: %v", err)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

func jsonEncode(v ref.Val) ref.Val {
	native, err := v.ConvertToNative(reflect.TypeFor[any]())
	if err != nil {
		if m, ok := v.(traits.Mapper); ok {
			native, err = m.ConvertToNative(reflect.TypeFor[map[string]any]())
		}
		if err != nil {
			return types.NewErr("json.encode: %v", err)
		}
	}
	b, err := json.Marshal(toJSON(native))
	if err != nil {
		return types.NewErr("json.encode: %v", err)
	}
	return types.String(b)
}

// toJSON turns CEL's native values (ref.Val inside lists and maps) into what encoding/json takes.
func toJSON(v any) any {
	switch v := v.(type) {
	case ref.Val:
		n, err := v.ConvertToNative(reflect.TypeFor[any]())
		if err != nil {
			return v.Value()
		}
		return toJSON(n)
	case map[ref.Val]ref.Val:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[str(k)] = toJSON(x)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			ks, _ := k.(string)
			out[ks] = toJSON(x)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = toJSON(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = toJSON(x)
		}
		return out
	case []ref.Val:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = toJSON(x)
		}
		return out
	}
	return v
}

func queryDecode(s ref.Val) ref.Val {
	q, err := url.ParseQuery(str(s))
	if err != nil {
		return types.NewErr("queryString.decode: %v", err)
	}
	return types.DefaultTypeAdapter.NativeToValue(map[string][]string(q))
}

func queryEncode(m ref.Val) ref.Val {
	native, err := m.ConvertToNative(reflect.TypeFor[map[string]any]())
	if err != nil {
		return types.NewErr("queryString.encode: %v", err)
	}
	q := url.Values{}
	for k, v := range native.(map[string]any) {
		switch v := toJSON(v).(type) {
		case []any:
			for _, x := range v {
				q.Add(k, jsonScalar(x))
			}
		default:
			q.Add(k, jsonScalar(v))
		}
	}
	return types.String(q.Encode())
}

// jsonScalar is a value as query string text.
func jsonScalar(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func urlEscape(s ref.Val) ref.Val { return types.String(url.QueryEscape(str(s))) }

func urlUnescape(s ref.Val) ref.Val {
	u, err := url.QueryUnescape(str(s))
	if err != nil {
		return types.NewErr("unescapeUrl: %v", err)
	}
	return types.String(u)
}

// urlParse is a URL as a map of Go's url.URL fields, snake-cased.
func urlParse(s ref.Val) ref.Val {
	u, err := url.Parse(str(s))
	if err != nil {
		return types.NewErr("parseUrl: %v", err)
	}
	pw, _ := u.User.Password()
	return types.DefaultTypeAdapter.NativeToValue(map[string]any{
		"scheme": u.Scheme, "opaque": u.Opaque, "host": u.Host, "hostname": u.Hostname(), "port": u.Port(), "path": u.Path,
		"raw_path": u.RawPath, "raw_query": u.RawQuery, "fragment": u.Fragment, "username": u.User.Username(), "password": pw,
		"query": map[string][]string(u.Query()),
	})
}

// randInt is a uniformly random integer from lo to hi, both included.
func randInt(lo, hi int64) ref.Val {
	if lo < 0 || hi < lo {
		return types.NewErr("rand.int: the range must be of positive integers with min <= max, got %d, %d", lo, hi)
	}
	n, err := rand.Int(rand.Reader, big.NewInt(hi-lo+1))
	if err != nil {
		return types.NewErr("rand.int: %v", err)
	}
	return types.Int(lo + n.Int64())
}

// refs is what a checked expression reads: the variables and functions edgeplane cannot fill
// (variable.unavailable, secrets.get), each with why, and the first part of the name of every
// variable it reads (req, vars, actions, …).
type refs struct {
	unavailable, roots []string
	// names are the full names of the variables it reads (conn.client_ip, vars, …).
	names []string
}

// inspect finds the refs of a checked expression.
func inspect(a *cel.Ast) refs {
	var r refs
	for _, ref := range a.NativeRep().ReferenceMap() {
		if v, ok := variables[ref.Name]; ok && v.unavailable != "" {
			r.unavailable = append(r.unavailable, ref.Name+": "+v.unavailable)
		}
		if slices.Contains(ref.OverloadIDs, secretsOverload) {
			r.unavailable = append(r.unavailable, "secrets.get: "+noVaults)
		}
		if ref.Name != "" {
			root, _, _ := strings.Cut(ref.Name, ".")
			r.roots = append(r.roots, root)
			if strings.HasPrefix(ref.Name, "conn.bytes_") {
				r.roots = append(r.roots, "conn.bytes") // the listener counts bytes only for such policies
			}
			if ref.Name == "conn.tls.ja4_fingerprint" {
				r.roots = append(r.roots, ref.Name) // the listener fingerprints only for such policies
			}
			r.names = append(r.names, ref.Name)
		}
	}
	slices.Sort(r.unavailable)
	r.unavailable = slices.Compact(r.unavailable)
	return r
}
