# Compiles the shipped profiles (costmodels/profiles/DEVICE.sql) into C, so that ptplan
# carries them and needs no data path: one NUL-ended byte array per file and the table
# pt_shipped_sql (cost.h) naming each by its device, the file's name.
#   cmake -DOUT=FILE -DFILES="a.sql;b.sql" -P embed.cmake
set(body "/* Written by costmodels/embed.cmake from costmodels/profiles/: do not edit. */\n")
string(APPEND body "#include \"cost.h\"\n\n")
set(table "")
set(i 0)
foreach(f IN LISTS FILES)
  get_filename_component(device "${f}" NAME_WE)
  file(READ "${f}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)"
         "\\1\n" bytes "${bytes}")
  string(APPEND body "static const char profile_${i}[] = {\n${bytes}0x00};\n\n")
  string(APPEND table "    {\"${device}\", profile_${i}},\n")
  math(EXPR i "${i} + 1")
endforeach()
string(APPEND body "const pt_shipped_sql pt_shipped_sqls[] = {\n${table}    {NULL, NULL}};\n")
file(WRITE "${OUT}.tmp" "${body}")
file(RENAME "${OUT}.tmp" "${OUT}")
