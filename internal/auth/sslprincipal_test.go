package auth

import "testing"

func TestSSLPrincipalMapping(t *testing.T) {
	// The rules of Kafka's documentation of ssl.principal.mapping.rules.
	docs := "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT"
	for _, tc := range []struct {
		rules, dn, want string
	}{
		{"", "CN=client,O=Quire", "CN=client,O=Quire"},
		{"DEFAULT", "CN=client,O=Quire", "CN=client,O=Quire"},
		{docs, "CN=kafka-server,OU=ServiceUsers,O=Org,C=US", "kafka-server"},
		{docs, "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US", "duke@javasoft"},
		{docs, "OU=JavaSoft,CN=Adm1n.X,O=Sun", "adm1n.x"},
		{docs, "O=nobody", "O=nobody"},
		{"RULE:^CN=([^,]*).*$/$1/U", "CN=alice,O=Quire", "ALICE"},
		{"RULE:^CN=([^,]*),O=Quire$/$1/\nRULE:^.*$/guest/", "CN=bob,O=Other", "guest"},
		{`RULE:^CN=a\/b$/ab/`, "CN=a/b", "ab"},
	} {
		m, err := ParseSSLPrincipalMappingRules(tc.rules)
		if err != nil {
			t.Fatalf("%q: %v", tc.rules, err)
		}
		got, err := m.Map(tc.dn)
		if err != nil || got != tc.want {
			t.Errorf("rules %q, DN %q: %q, %v; want %q", tc.rules, tc.dn, got, err, tc.want)
		}
	}
	m, err := ParseSSLPrincipalMappingRules("RULE:^CN=([^,]*),O=Quire$/$1/")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := m.Map("CN=eve,O=Elsewhere"); err == nil {
		t.Errorf("no rule matches, yet mapped to %q", got)
	}
	if got, err := m.Map("CN=,O=Quire"); err == nil {
		t.Errorf("an empty name accepted: %q", got)
	}
	for _, bad := range []string{"RULES:x/y/", "RULE:x/y", "RULE:x/y/Q", "RULE:(/y/", "junk,DEFAULT", "RULE:a/b/c/d"} {
		if _, err := ParseSSLPrincipalMappingRules(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzSSLPrincipalMapping(f *testing.F) {
	f.Add("RULE:^CN=(.*?),OU=(.*?)$/$1@$2/L,DEFAULT", "CN=a,OU=b")
	f.Add("DEFAULT", "")
	f.Fuzz(func(t *testing.T, rules, dn string) {
		m, err := ParseSSLPrincipalMappingRules(rules)
		if err != nil {
			return
		}
		if name, err := m.Map(dn); err == nil && name == "" {
			t.Fatalf("rules %q map %q to an empty name", rules, dn)
		}
	})
}
