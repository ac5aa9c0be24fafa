package fencev1_test

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

var (
	lowerSnake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	upperSnake = regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`)
	pascal     = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	version    = regexp.MustCompile(`^v[0-9]+((alpha|beta)[0-9]*)?$`)
)

// styleRule is one rule of the fence API's style: buf's STANDARD lint
// rules that apply to a single file, by buf's names. It returns what breaks
// the rule, one line each.
type styleRule struct {
	name  string
	check func(f protoreflect.FileDescriptor) []string
}

var styleRules = []styleRule{
	{"PACKAGE_LOWER_SNAKE_CASE", func(f protoreflect.FileDescriptor) (bad []string) {
		for _, part := range strings.Split(string(f.Package()), ".") {
			if !lowerSnake.MatchString(part) {
				bad = append(bad, fmt.Sprintf("package %s: %q is not lower_snake_case", f.Package(), part))
			}
		}
		return bad
	}},
	{"PACKAGE_VERSION_SUFFIX", func(f protoreflect.FileDescriptor) []string {
		if !version.MatchString(string(f.Package().Name())) {
			return []string{fmt.Sprintf("package %s does not end in a version such as v1 or v1beta1", f.Package())}
		}
		return nil
	}},
	{"FILE_LOWER_SNAKE_CASE", func(f protoreflect.FileDescriptor) []string {
		if name := strings.TrimSuffix(path.Base(f.Path()), ".proto"); !lowerSnake.MatchString(name) {
			return []string{fmt.Sprintf("file %s is not lower_snake_case", f.Path())}
		}
		return nil
	}},
	{"IMPORT_NO_PUBLIC", func(f protoreflect.FileDescriptor) (bad []string) {
		for i := range f.Imports().Len() {
			if imp := f.Imports().Get(i); imp.IsPublic {
				bad = append(bad, fmt.Sprintf("import %s is public", imp.Path()))
			}
		}
		return bad
	}},
	{"IMPORT_USED", func(f protoreflect.FileDescriptor) (bad []string) {
		used := map[string]bool{}
		each(f, func(d protoreflect.Descriptor) {
			var refs []protoreflect.Descriptor
			switch d := d.(type) {
			case protoreflect.FieldDescriptor:
				refs = []protoreflect.Descriptor{d.Message(), d.Enum()}
			case protoreflect.MethodDescriptor:
				refs = []protoreflect.Descriptor{d.Input(), d.Output()}
			}
			for _, r := range refs {
				if r != nil && r.ParentFile() != nil {
					used[r.ParentFile().Path()] = true
				}
			}
		})
		for i := range f.Imports().Len() {
			if p := f.Imports().Get(i).Path(); !used[p] {
				bad = append(bad, fmt.Sprintf("import %s is not used", p))
			}
		}
		return bad
	}},
	{"MESSAGE_PASCAL_CASE, ENUM_PASCAL_CASE, SERVICE_PASCAL_CASE, RPC_PASCAL_CASE", func(f protoreflect.FileDescriptor) (bad []string) {
		each(f, func(d protoreflect.Descriptor) {
			switch d.(type) {
			case protoreflect.MessageDescriptor, protoreflect.EnumDescriptor, protoreflect.ServiceDescriptor, protoreflect.MethodDescriptor:
				if !pascal.MatchString(string(d.Name())) {
					bad = append(bad, fmt.Sprintf("%s is not PascalCase", d.FullName()))
				}
			}
		})
		return bad
	}},
	{"FIELD_LOWER_SNAKE_CASE, ONEOF_LOWER_SNAKE_CASE, FIELD_NO_DESCRIPTOR", func(f protoreflect.FileDescriptor) (bad []string) {
		each(f, func(d protoreflect.Descriptor) {
			switch d.(type) {
			case protoreflect.FieldDescriptor, protoreflect.OneofDescriptor:
				if !lowerSnake.MatchString(string(d.Name())) || strings.EqualFold(string(d.Name()), "descriptor") {
					bad = append(bad, fmt.Sprintf("%s is not lower_snake_case, or is named descriptor", d.FullName()))
				}
			}
		})
		return bad
	}},
	{"ENUM_VALUE_UPPER_SNAKE_CASE, ENUM_VALUE_PREFIX, ENUM_ZERO_VALUE_SUFFIX, ENUM_NO_ALLOW_ALIAS", func(f protoreflect.FileDescriptor) (bad []string) {
		each(f, func(d protoreflect.Descriptor) {
			e, ok := d.(protoreflect.EnumDescriptor)
			if !ok {
				return
			}
			if opts, ok := e.Options().(*descriptorpb.EnumOptions); ok && opts.GetAllowAlias() {
				bad = append(bad, fmt.Sprintf("%s allows aliases", e.FullName()))
			}
			prefix := toUpperSnake(string(e.Name())) + "_"
			for i := range e.Values().Len() {
				v := e.Values().Get(i)
				name := string(v.Name())
				if !upperSnake.MatchString(name) || !strings.HasPrefix(name, prefix) {
					bad = append(bad, fmt.Sprintf("%s is not UPPER_SNAKE_CASE with the prefix %s", v.FullName(), prefix))
				}
				if v.Number() == 0 && name != prefix+"UNSPECIFIED" {
					bad = append(bad, fmt.Sprintf("%s, the zero value, is not %sUNSPECIFIED", v.FullName(), prefix))
				}
			}
		})
		return bad
	}},
	{"SERVICE_SUFFIX, RPC_REQUEST_STANDARD_NAME, RPC_RESPONSE_STANDARD_NAME, RPC_REQUEST_RESPONSE_UNIQUE", func(f protoreflect.FileDescriptor) (bad []string) {
		usedBy := map[protoreflect.FullName]protoreflect.FullName{}
		for i := range f.Services().Len() {
			s := f.Services().Get(i)
			if !strings.HasSuffix(string(s.Name()), "Service") {
				bad = append(bad, fmt.Sprintf("service %s does not end in Service", s.FullName()))
			}
			for j := range s.Methods().Len() {
				m := s.Methods().Get(j)
				for _, msg := range []struct {
					desc   protoreflect.MessageDescriptor
					suffix string
				}{{m.Input(), "Request"}, {m.Output(), "Response"}} {
					name := string(msg.desc.Name())
					if name != string(m.Name())+msg.suffix && name != string(s.Name())+string(m.Name())+msg.suffix {
						bad = append(bad, fmt.Sprintf("%s takes or returns %s, not %s%s", m.FullName(), msg.desc.FullName(), m.Name(), msg.suffix))
					}
					if other, ok := usedBy[msg.desc.FullName()]; ok {
						bad = append(bad, fmt.Sprintf("%s is used by both %s and %s", msg.desc.FullName(), other, m.FullName()))
					}
					usedBy[msg.desc.FullName()] = m.FullName()
				}
			}
		}
		return bad
	}},
}

// each calls fn on every message, field, oneof, enum, service and method in
// f, nested ones included.
func each(f protoreflect.FileDescriptor, fn func(protoreflect.Descriptor)) {
	enums := func(es protoreflect.EnumDescriptors) {
		for i := range es.Len() {
			fn(es.Get(i))
		}
	}
	var messages func(protoreflect.MessageDescriptors)
	messages = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			m := ms.Get(i)
			fn(m)
			for j := range m.Fields().Len() {
				fn(m.Fields().Get(j))
			}
			for j := range m.Oneofs().Len() {
				if o := m.Oneofs().Get(j); !o.IsSynthetic() {
					fn(o)
				}
			}
			enums(m.Enums())
			messages(m.Messages())
		}
	}
	messages(f.Messages())
	enums(f.Enums())
	for i := range f.Services().Len() {
		s := f.Services().Get(i)
		fn(s)
		for j := range s.Methods().Len() {
			fn(s.Methods().Get(j))
		}
	}
}

// toUpperSnake turns a PascalCase name into UPPER_SNAKE_CASE, as buf does
// for the enum value prefix: FenceEventType is FENCE_EVENT_TYPE.
func toUpperSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' && (s[i-1] < 'A' || s[i-1] > 'Z') {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// TestFenceAPIStyle holds fence.proto to the style rules: the names a
// client in any language generates from it follow protobuf's conventions.
func TestFenceAPIStyle(t *testing.T) {
	for _, rule := range styleRules {
		for _, problem := range rule.check(fencev1.File_fence_v1_fence_proto) {
			t.Errorf("%s: %s", rule.name, problem)
		}
	}
}

// TestStyleRulesCatch gives each rule a file that breaks it: a rule that
// passes everything would let fence.proto drift unnoticed.
func TestStyleRulesCatch(t *testing.T) {
	const good = `name: "fence/v1/good.proto" package: "fencegate.fence.v1" syntax: "proto3"
		message_type { name: "GetThingRequest" field { name: "thing_name" number: 1 type: TYPE_STRING } }
		message_type { name: "GetThingResponse" }
		enum_type { name: "ThingKind" value { name: "THING_KIND_UNSPECIFIED" number: 0 } }
		service { name: "ThingService" method { name: "GetThing" input_type: ".fencegate.fence.v1.GetThingRequest" output_type: ".fencegate.fence.v1.GetThingResponse" } }`
	breaking := map[string]string{
		"PACKAGE_LOWER_SNAKE_CASE": `name: "fence/v1/a.proto" package: "fencegate.Fence.v1" syntax: "proto3"`,
		"PACKAGE_VERSION_SUFFIX":   `name: "fence/v1/a.proto" package: "fencegate.fence" syntax: "proto3"`,
		"FILE_LOWER_SNAKE_CASE":    `name: "fence/v1/Fence.proto" package: "fencegate.fence.v1" syntax: "proto3"`,
		"IMPORT_NO_PUBLIC": `name: "fence/v1/a.proto" package: "fencegate.fence.v1" syntax: "proto3"
			dependency: "google/protobuf/duration.proto" public_dependency: 0
			message_type { name: "Wait" field { name: "wait" number: 1 type: TYPE_MESSAGE type_name: ".google.protobuf.Duration" } }`,
		"IMPORT_USED": `name: "fence/v1/a.proto" package: "fencegate.fence.v1" syntax: "proto3"
			dependency: "google/protobuf/duration.proto"`,
		"MESSAGE_PASCAL_CASE, ENUM_PASCAL_CASE, SERVICE_PASCAL_CASE, RPC_PASCAL_CASE": `name: "fence/v1/a.proto" package: "fencegate.fence.v1" syntax: "proto3"
			message_type { name: "get_thing" }`,
		"FIELD_LOWER_SNAKE_CASE, ONEOF_LOWER_SNAKE_CASE, FIELD_NO_DESCRIPTOR": `name: "fence/v1/a.proto" package: "fencegate.fence.v1" syntax: "proto3"
			message_type { name: "Thing" field { name: "thingName" number: 1 type: TYPE_STRING } }`,
		"ENUM_VALUE_UPPER_SNAKE_CASE, ENUM_VALUE_PREFIX, ENUM_ZERO_VALUE_SUFFIX, ENUM_NO_ALLOW_ALIAS": `name: "fence/v1/a.proto" package: "fencegate.fence.v1" syntax: "proto3"
			enum_type { name: "ThingKind" value { name: "THING_KIND_NONE" number: 0 } }`,
		"SERVICE_SUFFIX, RPC_REQUEST_STANDARD_NAME, RPC_RESPONSE_STANDARD_NAME, RPC_REQUEST_RESPONSE_UNIQUE": `name: "fence/v1/a.proto" package: "fencegate.fence.v1" syntax: "proto3"
			message_type { name: "Thing" }
			service { name: "ThingService" method { name: "GetThing" input_type: ".fencegate.fence.v1.Thing" output_type: ".fencegate.fence.v1.Thing" } }`,
	}
	for _, rule := range styleRules {
		t.Run(rule.name, func(t *testing.T) {
			if problems := rule.check(parseFile(t, good)); len(problems) > 0 {
				t.Errorf("a file that keeps the rule: %v", problems)
			}
			src, ok := breaking[rule.name]
			if !ok {
				t.Fatal("no file that breaks this rule")
			}
			if problems := rule.check(parseFile(t, src)); len(problems) == 0 {
				t.Errorf("passed a file that breaks it:\n%s", src)
			}
		})
	}
}

func parseFile(t *testing.T, text string) protoreflect.FileDescriptor {
	t.Helper()
	var fd descriptorpb.FileDescriptorProto
	if err := prototext.Unmarshal([]byte(text), &fd); err != nil {
		t.Fatalf("parse %s: %v", text, err)
	}
	f, err := protodesc.NewFile(&fd, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatalf("build %s: %v", text, err)
	}
	return f
}
