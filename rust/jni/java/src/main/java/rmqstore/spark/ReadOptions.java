package rmqstore.spark;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;
import rmqstore.jni.InvalidArgumentException;

/**
 * The batch read options of the source, parsed and checked as the Python source
 * (python/rmqstore/spark/options.py) does, with the same names, defaults and messages. Plain
 * data: Spark serializes it to the executors.
 */
final class ReadOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  static final int ROWS_PER_PARTITION = 250_000;
  static final int MAX_PATTERN_LENGTH = 64 * 1024;
  static final long EARLIEST = -2;
  static final long LATEST = -1;
  static final String OFFSETS_EXAMPLE = "{\"TopicA\":{\"0\":23,\"1\":-1},\"TopicB\":{\"0\":-2}}";
  static final String ASSIGN_EXAMPLE = "{\"TopicA\":[0,1]}";

  private static final Set<String> COMMON =
      Set.of(
          "path",
          "rowsperpartition",
          "topics",
          "topicpattern",
          "assign",
          "startingoffsets",
          "startingtimestamp",
          "failondataloss",
          "includeproperties");
  private static final Set<String> BATCH_ONLY =
      Set.of("endingoffsets", "endingtimestamp", "minpartitions");
  private static final Set<String> STREAM_ONLY = Set.of("maxoffsetspertrigger", "consumergroup");
  private static final Map<String, String> SPELLING =
      Map.ofEntries(
          Map.entry("topicpattern", "topicPattern"),
          Map.entry("startingoffsets", "startingOffsets"),
          Map.entry("endingoffsets", "endingOffsets"),
          Map.entry("startingtimestamp", "startingTimestamp"),
          Map.entry("endingtimestamp", "endingTimestamp"),
          Map.entry("failondataloss", "failOnDataLoss"),
          Map.entry("minpartitions", "minPartitions"),
          Map.entry("rowsperpartition", "rowsPerPartition"),
          Map.entry("includeproperties", "includeProperties"),
          Map.entry("maxoffsetspertrigger", "maxOffsetsPerTrigger"),
          Map.entry("consumergroup", "consumerGroup"));

  final String path;
  /** store.&lt;setting&gt; options: StoreConfig setting names and their text. */
  final TreeMap<String, String> settings;

  final List<String> topics; // null: not given
  final String topicPattern; // null: not given
  final TreeMap<String, int[]> assign; // null: not given
  /** "earliest", "latest", or per topic and queue an offset (-2 earliest, -1 latest). */
  final String startingWord;

  final Map<String, Map<Integer, Long>> starting;
  final String endingWord;
  final Map<String, Map<Integer, Long>> ending;
  final Long startingTimestamp;
  final Long endingTimestamp;
  final boolean failOnDataLoss;
  final Integer minPartitions;
  final long rowsPerPartition;
  final boolean includeProperties;
  /** Whether these are the options of a streaming read (else a batch read). */
  final boolean streaming;
  /** maxOffsetsPerTrigger (streaming; null: all available). */
  final Long maxOffsetsPerTrigger;
  /** consumerGroup (streaming; null: none). */
  final String consumerGroup;

  static InvalidArgumentException bad(String message) {
    return new InvalidArgumentException("rmqstore data source: " + message);
  }

  static String spell(String name) {
    return SPELLING.getOrDefault(name, name);
  }

  /** Names as Python shows a list of strings: ['a', 'b']. */
  static String names(java.util.Collection<String> names) {
    List<String> quoted = new ArrayList<>();
    for (String n : names) {
      quoted.add("'" + n + "'");
    }
    return "[" + String.join(", ", quoted) + "]";
  }

  static String show(String text) {
    return show(text, 60);
  }

  static String show(String text, int limit) {
    if (text.length() <= limit) {
      return "'" + text + "'";
    }
    return "'" + text.substring(0, limit) + "'... (" + text.length() + " characters)";
  }

  /** The options of a batch read. */
  ReadOptions(Map<String, String> raw) {
    this(raw, false);
  }

  /** The options of a batch read, or of a streaming read when {@code streaming}. */
  ReadOptions(Map<String, String> raw, boolean streaming) {
    this.streaming = streaming;
    String what = streaming ? "streaming reads" : "batch reads";
    Set<String> known = new TreeSet<>(COMMON);
    known.addAll(streaming ? STREAM_ONLY : BATCH_ONLY);
    Map<String, String> options = new TreeMap<>();
    for (Map.Entry<String, String> e : raw.entrySet()) {
      options.put(e.getKey().toLowerCase(Locale.ROOT), e.getValue());
    }
    settings = new TreeMap<>();
    for (Map.Entry<String, String> e : options.entrySet()) {
      String key = e.getKey();
      if (key.startsWith("store.")) {
        String name = key.substring("store.".length());
        if (name.isEmpty()) {
          throw bad("option " + show(key) + " names no StoreConfig setting");
        }
        settings.put(name, e.getValue());
        continue;
      }
      if (known.contains(key)) {
        continue;
      }
      if (STREAM_ONLY.contains(key) || BATCH_ONLY.contains(key) || COMMON.contains(key)) {
        throw bad("option '" + spell(key) + "' does not apply to " + what);
      }
      TreeSet<String> spelled = new TreeSet<>();
      for (String k : known) {
        spelled.add(spell(k));
      }
      throw bad(
          "unknown option "
              + show(key)
              + " for "
              + what
              + "; known: "
              + String.join(", ", spelled)
              + " and store.<StoreConfig setting>");
    }
    path = options.get("path");
    if (path == null || path.isEmpty()) {
      throw bad("no store path: pass it to load()/save() or as option 'path'");
    }
    if (!new File(path, "commitlog").isDirectory()) {
      throw bad(
          show(path, 200)
              + " is not an rmqstore store (no 'commitlog' folder in it); give the folder a"
              + " MessageStore or RocketMQ broker wrote");
    }
    List<String> given = new ArrayList<>();
    for (String k : new String[] {"topics", "topicpattern", "assign"}) {
      if (options.containsKey(k)) {
        given.add(spell(k));
      }
    }
    if (given.size() > 1) {
      throw bad("give at most one of topics, topicPattern, assign; got " + names(given));
    }
    if (options.containsKey("topics")) {
      List<String> list = new ArrayList<>();
      for (String t : options.get("topics").split(",", -1)) {
        if (!t.strip().isEmpty()) {
          list.add(t.strip());
        }
      }
      if (list.isEmpty()) {
        throw bad("topics is empty: give a comma-separated list of topic names");
      }
      topics = list;
    } else {
      topics = null;
    }
    topicPattern = options.get("topicpattern");
    if (topicPattern != null) {
      checkPattern(topicPattern);
    }
    assign = options.containsKey("assign") ? parseAssign(options.get("assign")) : null;
    String start = options.get("startingoffsets");
    String end = options.get("endingoffsets");
    startingWord = offsetWord("startingoffsets", start, streaming ? "latest" : "earliest", false);
    starting = startingWord == null ? parseOffsets("startingoffsets", start, false) : Map.of();
    endingWord = offsetWord("endingoffsets", end, "latest", true);
    ending = endingWord == null ? parseOffsets("endingoffsets", end, true) : Map.of();
    if (!streaming && "latest".equals(startingWord)) {
      throw bad("startingOffsets='latest' reads nothing in a batch query");
    }
    startingTimestamp = parseLong(options, "startingtimestamp", 0, Long.MAX_VALUE);
    endingTimestamp = parseLong(options, "endingtimestamp", 0, Long.MAX_VALUE);
    if (startingTimestamp != null
        && endingTimestamp != null
        && startingTimestamp > endingTimestamp) {
      throw bad(
          "startingTimestamp " + startingTimestamp + " is after endingTimestamp " + endingTimestamp);
    }
    Long min = parseLong(options, "minpartitions", 1, Integer.MAX_VALUE);
    minPartitions = min == null ? null : min.intValue();
    Long rows = parseLong(options, "rowsperpartition", 1, Long.MAX_VALUE);
    rowsPerPartition = rows == null ? ROWS_PER_PARTITION : rows;
    failOnDataLoss = parseBool(options, "failondataloss", true);
    includeProperties = parseBool(options, "includeproperties", false);
    maxOffsetsPerTrigger = parseLong(options, "maxoffsetspertrigger", 1, Long.MAX_VALUE);
    String group = options.get("consumergroup");
    if (group != null) {
      if (group.strip().isEmpty()) {
        throw bad("consumerGroup is empty");
      }
      if (group.contains("@")) {
        throw bad(
            "consumerGroup "
                + show(group)
                + " contains '@', which separates topic and group in"
                + " config/consumerOffset.json");
      }
    }
    consumerGroup = group;
  }

  static boolean parseBool(Map<String, String> options, String name, boolean dflt) {
    String text = options.get(name);
    if (text == null) {
      return dflt;
    }
    String v = text.strip().toLowerCase(Locale.ROOT);
    if (!v.equals("true") && !v.equals("false")) {
      throw bad(spell(name) + " must be 'true' or 'false', got " + show(text));
    }
    return v.equals("true");
  }

  private static final Pattern INTEGER = Pattern.compile("[+-]?[0-9]+");

  static Long parseLong(Map<String, String> options, String name, long min, long max) {
    String text = options.get(name);
    if (text == null) {
      return null;
    }
    String what = spell(name);
    String s = text.strip();
    if (!INTEGER.matcher(s).matches()) {
      throw bad(what + " must be an integer, got " + show(text));
    }
    long value;
    try {
      value = Long.parseLong(s.startsWith("+") ? s.substring(1) : s);
    } catch (NumberFormatException e) {
      throw bad(what + " must be between " + min + " and " + max + ", got " + show(text, 30));
    }
    if (value < min) {
      throw bad(what + " must be >= " + min + ", got " + value);
    }
    if (value > max) {
      throw bad(what + " must be between " + min + " and " + max + ", got " + value);
    }
    return value;
  }

  private static void checkPattern(String pattern) {
    if (pattern.isEmpty()) {
      throw bad("topicPattern is empty: give a regex that topic names fully match");
    }
    if (pattern.length() > MAX_PATTERN_LENGTH) {
      throw bad(
          "topicPattern is "
              + pattern.length()
              + " characters long; at most "
              + MAX_PATTERN_LENGTH);
    }
    try {
      Pattern.compile(pattern);
    } catch (PatternSyntaxException | StackOverflowError e) {
      throw bad("topicPattern " + show(pattern) + " is not a valid regex: " + e.getMessage());
    }
  }

  private static final ObjectMapper JSON =
      new ObjectMapper().enable(JsonParser.Feature.STRICT_DUPLICATE_DETECTION);

  private static JsonNode json(String name, String text, String example) {
    try {
      return JSON.readTree(text);
    } catch (JsonProcessingException e) {
      throw bad(
          spell(name)
              + " is not valid JSON ("
              + e.getOriginalMessage()
              + "); expected e.g. "
              + example);
    }
  }

  private static String offsetWord(String name, String text, String dflt, boolean isEnding) {
    if (text == null) {
      return dflt;
    }
    String word = text.strip().toLowerCase(Locale.ROOT);
    if (word.equals("latest") || (!isEnding && word.equals("earliest"))) {
      return word;
    }
    if (!text.strip().startsWith("{")) {
      String allowed = isEnding ? "'latest'" : "'earliest' or 'latest'";
      throw bad(
          spell(name)
              + " must be "
              + allowed
              + " or JSON like "
              + OFFSETS_EXAMPLE
              + ", got "
              + show(text));
    }
    return null;
  }

  private static Map<String, Map<Integer, Long>> parseOffsets(
      String name, String text, boolean isEnding) {
    String what = spell(name);
    JsonNode raw = json(name, text, OFFSETS_EXAMPLE);
    if (!raw.isObject()) {
      throw bad(what + " must be a JSON object like " + OFFSETS_EXAMPLE);
    }
    long lowest = isEnding ? LATEST : EARLIEST;
    String hint = isEnding ? "-1 (latest) or an offset >= 0" : "-2, -1 or an offset >= 0";
    Map<String, Map<Integer, Long>> result = new LinkedHashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = raw.properties().iterator(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> topic = it.next();
      if (!topic.getValue().isObject()) {
        throw bad(
            what
                + ": topic "
                + show(topic.getKey(), 30)
                + " must map queue ids to offsets, e.g. "
                + OFFSETS_EXAMPLE);
      }
      Map<Integer, Long> perQueue = new TreeMap<>();
      for (Iterator<Map.Entry<String, JsonNode>> q = topic.getValue().properties().iterator();
          q.hasNext(); ) {
        Map.Entry<String, JsonNode> e = q.next();
        int qid = queueId(what, e.getKey(), topic.getKey());
        if (perQueue.containsKey(qid)) {
          throw bad(what + " names queue " + qid + " of topic " + show(topic.getKey()) + " twice");
        }
        JsonNode v = e.getValue();
        if (!v.isIntegralNumber() || !v.canConvertToLong() || v.asLong() < lowest) {
          throw bad(
              what
                  + ": offset "
                  + v
                  + " of "
                  + show(topic.getKey(), 30)
                  + "/"
                  + e.getKey()
                  + " must be "
                  + hint);
        }
        perQueue.put(qid, v.asLong());
      }
      result.put(topic.getKey(), perQueue);
    }
    return result;
  }

  private static int queueId(String what, String text, String topic) {
    if (!text.matches("[0-9]{1,10}") || Long.parseLong(text) > Integer.MAX_VALUE) {
      throw bad(
          what
              + ": queue id "
              + show(text, 30)
              + " of topic "
              + show(topic, 30)
              + " is not an integer from 0 to "
              + Integer.MAX_VALUE);
    }
    return Integer.parseInt(text);
  }

  private static TreeMap<String, int[]> parseAssign(String text) {
    JsonNode raw = json("assign", text, ASSIGN_EXAMPLE);
    if (!raw.isObject() || raw.size() == 0) {
      throw bad("assign must be JSON like " + ASSIGN_EXAMPLE + ", got " + show(text));
    }
    TreeMap<String, int[]> assign = new TreeMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = raw.properties().iterator(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      if (!e.getValue().isArray()) {
        throw bad(
            "assign must be JSON like "
                + ASSIGN_EXAMPLE
                + ": topic "
                + show(e.getKey(), 30)
                + " maps to "
                + e.getValue().getNodeType().toString().toLowerCase(Locale.ROOT)
                + ", not a list of queue ids");
      }
      TreeSet<Integer> ids = new TreeSet<>();
      for (JsonNode q : e.getValue()) {
        if (!q.isIntegralNumber()
            || !q.canConvertToLong()
            || q.asLong() < 0
            || q.asLong() > Integer.MAX_VALUE) {
          throw bad(
              "assign must be JSON like "
                  + ASSIGN_EXAMPLE
                  + ": queue id "
                  + q
                  + " of topic "
                  + show(e.getKey(), 30)
                  + " is not an integer from 0 to "
                  + Integer.MAX_VALUE);
        }
        ids.add((int) q.asLong());
      }
      assign.put(e.getKey(), ids.stream().mapToInt(Integer::intValue).toArray());
    }
    return assign;
  }
}
